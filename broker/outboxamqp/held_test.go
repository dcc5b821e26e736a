package outboxamqp_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
)

// cut closes the connections the proxy carries and goes on accepting new
// ones: a network blip.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestHeldMessageLostWithTheChannel: a message held between two handler
// calls goes back to the broker when the connection drops, and the
// subscriber, instead of waiting out the delay for a channel that is gone,
// reconnects and gets it again at once.
func TestHeldMessageLostWithTheChannel(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	p := startProxy(t, "127.0.0.1:5672")
	s, err := outboxamqp.NewSubscriber(context.Background(), outboxamqp.SubscriberConfig{
		URL: "amqp://guest:guest@" + p.addr + "/", Group: "held", Queue: f.exchange + ".held",
		Exchange: f.exchange, BindingKey: f.topic, RedeliveryDelay: 20 * time.Second, ReconnectDelay: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.queues = append(f.queues, s.Queue(), s.DeadLetterQueue())
	t.Cleanup(func() { s.Close() })
	var (
		mu    sync.Mutex
		calls []time.Time
	)
	failed := make(chan struct{})
	succeeded := make(chan struct{})
	run(t, s, func(context.Context, outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, time.Now())
		if len(calls) == 1 {
			close(failed)
			return errors.New("transient")
		}
		if len(calls) == 2 {
			close(succeeded)
		}
		return nil
	})
	if errs := f.publisher(t).Publish(context.Background(), f.messages("held", 1)); errs != nil {
		t.Fatal(errs)
	}
	<-failed
	time.Sleep(200 * time.Millisecond) // the message is held, waiting out its 20s
	p.cut()
	select {
	case <-succeeded:
	case <-time.After(10 * time.Second):
		t.Fatal("the message did not come back within 10s of the connection drop (its redelivery delay is 20s)")
	}
	waitQueueLen(t, s.Queue(), 0)
}

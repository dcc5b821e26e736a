package outboxamqp_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
	"github.com/outbox-go/outbox/broker/outboxamqp/rabbittest"
)

// TestRestart stops and starts a private RabbitMQ node under a publisher and
// a running subscriber: while the broker is down Publish reports
// outbox.Unavailable; afterwards both reconnect by themselves, and every
// message published before, and after, reaches the handler.
func TestRestart(t *testing.T) {
	t.Parallel()
	node := rabbittest.Start(t)
	ctx := context.Background()
	pub, err := outboxamqp.NewPublisher(ctx, outboxamqp.PublisherConfig{URL: node.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := outboxamqp.NewSubscriber(ctx, outboxamqp.SubscriberConfig{URL: node.URL, Group: "restart", ReconnectDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	var mu sync.Mutex
	seen := map[string]bool{}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(runCtx, func(_ context.Context, m outbox.Message) error {
			mu.Lock()
			seen[m.MsgID] = true
			mu.Unlock()
			return nil
		})
	}()
	batch := func(prefix string) []outbox.Message {
		msgs := make([]outbox.Message, 20)
		for i := range msgs {
			msgs[i] = outbox.Message{MsgID: fmt.Sprintf("%s-%d", prefix, i), Topic: "order.paid", Key: fmt.Sprint(i % 3), Payload: []byte(`{"n":1}`)}
		}
		return msgs
	}
	before := batch("before")
	if errs := pub.Publish(ctx, before); errs != nil {
		t.Fatalf("Publish before the restart: %v", errs)
	}

	node.Stop(t)
	down, cancel := context.WithTimeout(ctx, 5*time.Second)
	for i, err := range pub.Publish(down, batch("down")) {
		if !outbox.IsUnavailable(err) {
			t.Errorf("Publish while the broker is down: message %d: %v, want outbox.Unavailable", i, err)
		}
	}
	cancel()
	node.Start(t)

	after := batch("after")
	if errs := pub.Publish(ctx, after); errs != nil {
		t.Fatalf("Publish after the restart: %v", errs)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		missing := 0
		for _, m := range append(before, after...) {
			if !seen[m.MsgID] {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages never reached the handler after the restart", missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v after its context ended", err)
	}
}

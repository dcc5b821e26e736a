package outboxamqp_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
	"github.com/outbox-go/outbox/broker/outboxamqp/rabbittest"
)

// TestBlockedBroker raises a memory alarm on a private RabbitMQ node: the
// broker blocks publishers, and Publish must answer at once that it is
// unavailable (the relay pauses without spending retries), not write into
// a connection the broker no longer reads and wait there past its context.
// Once the alarm clears, the same Publisher publishes again.
func TestBlockedBroker(t *testing.T) {
	t.Parallel()
	node := rabbittest.Start(t)
	ctx := context.Background()
	pub, err := outboxamqp.NewPublisher(ctx, outboxamqp.PublisherConfig{URL: node.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	// The subscriber's queue makes the messages routable.
	sub, err := outboxamqp.NewSubscriber(ctx, outboxamqp.SubscriberConfig{URL: node.URL, Group: "blocked"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	batch := func(prefix string) []outbox.Message {
		msgs := make([]outbox.Message, 20)
		for i := range msgs {
			msgs[i] = outbox.Message{MsgID: fmt.Sprintf("%s-%d", prefix, i), Topic: "order.paid", Payload: []byte(`{"n":1}`)}
		}
		return msgs
	}
	if errs := pub.Publish(ctx, batch("before")); errs != nil {
		t.Fatalf("Publish before the alarm: %v", errs)
	}

	node.Ctl(t, "set_vm_memory_high_watermark", "0.000001")
	// The blocked notice reaches the connection a moment after the alarm;
	// a Publish in that moment waits for confirms until its context ends.
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; ; n++ {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		start := time.Now()
		errs := pub.Publish(pctx, batch(fmt.Sprintf("alarm%d", n)))
		took := time.Since(start)
		cancel()
		if len(errs) != 20 {
			t.Fatalf("Publish during a memory alarm: %v, want an error per message", errs)
		}
		for i, err := range errs {
			if !outbox.IsUnavailable(err) {
				t.Fatalf("Publish during a memory alarm: message %d: %v, want outbox.Unavailable", i, err)
			}
		}
		if errors.Is(errs[0], outboxamqp.ErrBlocked) {
			if took > time.Second {
				t.Fatalf("Publish on a blocked connection took %s; it should not write or wait", took)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Publish saw the connection blocked within 30s; the last said %v", errs[0])
		}
	}

	node.Ctl(t, "set_vm_memory_high_watermark", "0.4")
	deadline = time.Now().Add(30 * time.Second)
	for {
		errs := pub.Publish(ctx, batch("after"))
		if errs == nil {
			break
		}
		if !outbox.IsUnavailable(errs[0]) || time.Now().After(deadline) {
			t.Fatalf("Publish after the alarm cleared: %v", errs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

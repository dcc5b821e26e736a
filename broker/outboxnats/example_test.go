package outboxnats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxnats"
)

// Example publishes one message and consumes it in a consumer group, against
// the NATS server on this machine. deliver=new makes the group start at the
// messages published after it was first created, so that what earlier runs
// left in the stream does not show up here.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const url = "nats://127.0.0.1:4222?subject=example.{topic}&stream=EXAMPLE&dead=example_dead.{group}&dead_stream=EXAMPLE_DEAD&deliver=new"

	// The subscriber first: when NewSubscriber returns, the group exists.
	sub, err := outboxnats.NewSubscriber(ctx, outboxnats.SubscriberConfig{URL: url, Group: "billing", Topic: "order.paid"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()

	pub, err := outboxnats.NewPublisher(ctx, outboxnats.PublisherConfig{URL: url})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	id := fmt.Sprintf("order-%d:OrderPaid", time.Now().UnixNano())
	errs := pub.Publish(ctx, []outbox.Message{{
		MsgID:     id,
		Topic:     "order.paid",
		Key:       "order-42",
		Payload:   json.RawMessage(`{"order":42,"amount":"19.90"}`),
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}})
	fmt.Println("acked:", errs == nil)

	runCtx, stop := context.WithCancel(ctx)
	err = sub.Run(runCtx, func(_ context.Context, m outbox.Message) error {
		fmt.Println("same id:", m.MsgID == id)
		fmt.Println("topic:", m.Topic, "key:", m.Key, "time:", m.CreatedAt.Format(time.RFC3339))
		fmt.Println("payload:", string(m.Payload))
		stop() // one message is enough here; Run acks it and returns
		return nil
	})
	fmt.Println("Run:", err)
	// Output:
	// acked: true
	// same id: true
	// topic: order.paid key: order-42 time: 2024-05-06T07:08:09Z
	// payload: {"order":42,"amount":"19.90"}
	// Run: <nil>
}

func ExampleNewPublisher_invalid() {
	_, err := outboxnats.NewPublisher(context.Background(), outboxnats.PublisherConfig{URL: "nats://127.0.0.1:4222?subject=outbox"})
	fmt.Println(err)
	// Output:
	// outboxnats: Subject (subject) "outbox" must be a subject prefix followed by .{topic}, e.g. "outbox.{topic}"
}

func ExampleConsumerName() {
	fmt.Println(outboxnats.ConsumerName("billing"))
	fmt.Println(outboxnats.ConsumerName("orders.eu"))
	// Output:
	// billing
	// orders_eu_e7951fa7
}

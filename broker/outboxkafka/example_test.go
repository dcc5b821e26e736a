package outboxkafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
)

// A publisher and a subscriber of one group, on kfake, franz-go's in-process
// Kafka (the way this package's own tests run).
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	url := "kafka://" + cluster.ListenAddrs()[0] + "?topic=outbox.{topic}&auto_create=true"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pub, err := outboxkafka.NewPublisher(ctx, outboxkafka.PublisherConfig{URL: url})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	errs := pub.Publish(ctx, []outbox.Message{
		{MsgID: "order-42:OrderPaid", Topic: "order.paid", Key: "order-42", Payload: json.RawMessage(`{"order":42}`),
			Headers: map[string]string{"tenant": "acme"}, CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)},
		{MsgID: "order-42:OrderShipped", Topic: "order.paid", Key: "order-42", Payload: json.RawMessage(`{"order":42,"shipped":true}`)},
	})
	fmt.Println("acked:", errs == nil)

	sub, err := outboxkafka.NewSubscriber(ctx, outboxkafka.SubscriberConfig{URL: url, Group: "billing", Topics: []string{"order.paid"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	received := 0
	err = sub.Run(runCtx, func(_ context.Context, m outbox.Message) error {
		fmt.Println(m.MsgID, m.Topic, m.Key, string(m.Payload), m.Headers)
		if received++; received == 2 {
			stop() // Run returns once this call's offset is committed
		}
		return nil
	})
	fmt.Println("Run:", err)
	// Output:
	// acked: true
	// order-42:OrderPaid order.paid order-42 {"order":42} map[tenant:acme]
	// order-42:OrderShipped order.paid order-42 {"order":42,"shipped":true} map[]
	// Run: <nil>
}

// A message whose handler keeps failing goes to the dead-letter topic, where
// DeadLetters finds it.
func ExampleDeadLetters() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	url := "kafka://" + cluster.ListenAddrs()[0] + "?auto_create=true&max_deliveries=2&redelivery_delay=10ms&dead_letter_after=1ms"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pub, err := outboxkafka.NewPublisher(ctx, outboxkafka.PublisherConfig{URL: url})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	pub.Publish(ctx, []outbox.Message{
		{MsgID: "poison", Topic: "jobs", Key: "queue", Payload: json.RawMessage(`{"n":1}`)},
		{MsgID: "fine", Topic: "jobs", Key: "queue", Payload: json.RawMessage(`{"n":2}`)},
	})

	cfg := outboxkafka.SubscriberConfig{URL: url, Group: "workers", Topics: []string{"jobs"}}
	sub, err := outboxkafka.NewSubscriber(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	_ = sub.Run(runCtx, func(_ context.Context, m outbox.Message) error {
		if m.MsgID == "poison" {
			return errors.New("cannot apply")
		}
		stop() // "fine" comes after "poison": one key, one partition
		return nil
	})

	dead, err := outboxkafka.DeadLetters(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range dead {
		fmt.Println(d.Message.MsgID, d.Topic, d.Deliveries, d.Err)
	}
	// Output:
	// poison jobs 2 cannot apply
}

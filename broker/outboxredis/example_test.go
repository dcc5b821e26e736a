package outboxredis_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxredis"
)

// The relay's side publishes; a consumer group reads.
func Example() {
	ctx := context.Background()
	// A stream of its own for the example; by default it is "outbox:{topic}".
	url := fmt.Sprintf("redis://127.0.0.1:6379/0?stream=example-%d:{topic}", time.Now().UnixNano())

	sub, err := outboxredis.NewSubscriber(ctx, outboxredis.SubscriberConfig{URL: url, Group: "billing", Topic: "order.paid"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()

	pub, err := outboxredis.NewPublisher(ctx, outboxredis.PublisherConfig{URL: url})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	errs := pub.Publish(ctx, []outbox.Message{{
		MsgID:     "order-42:OrderPaid",
		Topic:     "order.paid",
		Key:       "order-42",
		Payload:   json.RawMessage(`{"order":42,"amount":"19.90"}`),
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}})
	fmt.Println("acked:", errs == nil)

	runCtx, stop := context.WithCancel(ctx)
	_ = sub.Run(runCtx, func(ctx context.Context, m outbox.Message) error {
		fmt.Println("id:", m.MsgID)
		fmt.Println("topic:", m.Topic, "key:", m.Key, "time:", m.CreatedAt.Format(time.RFC3339))
		fmt.Println("payload:", string(m.Payload))
		stop()
		return nil
	})

	// Clean up the example's keys.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	rdb.Del(ctx, sub.Stream())
	// Output:
	// acked: true
	// id: order-42:OrderPaid
	// topic: order.paid key: order-42 time: 2024-05-06T07:08:09Z
	// payload: {"order":42,"amount":"19.90"}
}

func ExampleNewPublisher_invalid() {
	_, err := outboxredis.NewPublisher(context.Background(), outboxredis.PublisherConfig{
		URL: "redis://app:secret@localhost:6379/0?maxlen=some",
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, outboxredis.ErrConfig))
	// Output:
	// outboxredis: URL parameter maxlen="some" is not a positive integer
	// true
}

// Once guards an effect outside any database, here an e-mail, by msg_id.
func ExampleOnce() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	key := fmt.Sprintf("once:mailer:order-42:OrderPaid:%d", time.Now().UnixNano())
	defer rdb.Del(ctx, key)

	send := func(ctx context.Context) error {
		fmt.Println("sending the receipt")
		return nil
	}
	for delivery := 1; delivery <= 2; delivery++ {
		applied, err := outboxredis.Once(ctx, rdb, key, 7*24*time.Hour, send)
		fmt.Printf("delivery %d: applied=%v err=%v\n", delivery, applied, err)
	}
	// Output:
	// sending the receipt
	// delivery 1: applied=true err=<nil>
	// delivery 2: applied=false err=<nil>
}

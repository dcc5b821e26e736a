package outboxamqp_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
)

// The relay's side and a consumer's side of one exchange: the subscriber's
// group queue exists once NewSubscriber returns, the publisher's Publish
// returns nil once RabbitMQ confirmed every message, and Run hands each
// message to the handler.
func Example() {
	ctx := context.Background()
	url := "amqp://guest:guest@127.0.0.1:5672/?exchange=example-shop"
	defer dropExample("example-shop", "example-billing")

	sub, err := outboxamqp.NewSubscriber(ctx, outboxamqp.SubscriberConfig{URL: url, Group: "example-billing", BindingKey: "order.*"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Close()

	pub, err := outboxamqp.NewPublisher(ctx, outboxamqp.PublisherConfig{URL: url})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	errs := pub.Publish(ctx, []outbox.Message{
		{MsgID: "order-42:OrderPaid", Topic: "order.paid", Key: "order-42", Payload: []byte(`{"amount":42}`)},
		{MsgID: "user-7:SignedUp", Topic: "user.signedup", Payload: []byte(`{}`)},
	})
	for _, err := range errs {
		var returned *outboxamqp.ReturnedError
		fmt.Println("refused, no queue bound:", errors.As(err, &returned), "retry later:", outbox.IsUnavailable(err))
	}

	runCtx, stop := context.WithCancel(ctx)
	err = sub.Run(runCtx, func(_ context.Context, m outbox.Message) error {
		fmt.Println(m.MsgID, m.Topic, m.Key, string(m.Payload))
		stop() // Run returns once this message is acked
		return nil
	})
	fmt.Println("Run:", err)
	// Output:
	// refused, no queue bound: false retry later: false
	// refused, no queue bound: true retry later: false
	// order-42:OrderPaid order.paid order-42 {"amount":42}
	// Run: <nil>
}

// dropExample deletes what the example declared on the shared broker.
func dropExample(exchange, group string) {
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	ch.QueueDelete(group, false, false, false)
	ch.QueueDelete(group+".dead", false, false, false)
	ch.ExchangeDelete(exchange, false, false)
}

// A publisher whose connections the caller dials, here with a heartbeat and a
// connection name of its own; the URL holds only the adapter's parameters.
// The publisher calls Dial again after each lost connection.
func ExamplePublisherConfig_dial() {
	cfg := outboxamqp.PublisherConfig{
		URL: "?exchange=shop",
		Dial: func(ctx context.Context) (*amqp.Connection, error) {
			props := amqp.NewConnectionProperties()
			props.SetClientConnectionName("shop relay")
			return amqp.DialConfig("amqp://guest:guest@127.0.0.1:5672/", amqp.Config{Heartbeat: 5 * time.Second, Properties: props})
		},
	}
	pub, err := outboxamqp.NewPublisher(context.Background(), cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
}

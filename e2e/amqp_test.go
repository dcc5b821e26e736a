package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
	"github.com/outbox-go/outbox/broker/outboxamqp/rabbittest"
	"github.com/outbox-go/outbox/brokertest"
)

// TestAMQP runs the scenario through RabbitMQ on a private node (its own
// node name, ports and data directory; the machine's shared broker is left
// alone), with a durable quorum queue for the group, so that what the broker
// confirmed survives Restart.
func TestAMQP(t *testing.T) {
	node := rabbittest.Start(t)
	b := amqpBroker(node.URL + "?exchange=e2e&reconnect_delay=1s")
	b.Restart = func(t *testing.T) { node.Restart(t) }
	Run(t, b)
}

// amqpBroker publishes and subscribes through the RabbitMQ at url.
func amqpBroker(url string) Broker {
	return Broker{
		Name:  "amqp",
		Topic: "transfer.done",
		NewPublisher: func(t *testing.T) outbox.Publisher {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := outboxamqp.NewPublisher(ctx, outboxamqp.PublisherConfig{URL: url})
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			return p
		},
		NewSubscriber: func(t *testing.T, group string) brokertest.Subscriber {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := outboxamqp.NewSubscriber(ctx, outboxamqp.SubscriberConfig{URL: url, Group: group,
				// A failed message holds the subscriber for the delay; the
				// harness fails about one delivery in eight.
				RedeliveryDelay: 10 * time.Millisecond})
			if err != nil {
				t.Fatalf("NewSubscriber: %v", err)
			}
			return s
		},
	}
}

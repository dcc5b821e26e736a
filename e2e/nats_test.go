package e2e

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxnats"
	"github.com/outbox-go/outbox/brokertest"
)

// TestNATS runs the scenario through NATS JetStream on a private nats-server
// (its own port and store directory), which Restart kills and starts again.
func TestNATS(t *testing.T) {
	srv := startPrivate(t, natsSpec)
	// The duplicate window is kept short on purpose: the harness checks that
	// the inbox discards duplicate deliveries, and with the default of two
	// minutes JetStream itself would drop every copy the scenario publishes
	// again. Copies published within the window are still dropped by the
	// stream; those published after it reach the inbox.
	url := "nats://" + srv.addr() + "?stream=E2E&subject=e2e.{topic}&dead=e2edead.{group}&dead_stream=E2E_DEAD&duplicates=100ms&ack_wait=5s&timeout=2s"
	b := natsBroker(url)
	b.Restart = func(t *testing.T) { srv.restart(t) }
	Run(t, b)
}

// natsBroker publishes and subscribes through the NATS JetStream at url.
func natsBroker(url string) Broker {
	return Broker{
		Name:  "nats",
		Topic: "transfer.done",
		NewPublisher: func(t *testing.T) outbox.Publisher {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := outboxnats.NewPublisher(ctx, outboxnats.PublisherConfig{URL: url})
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			return p
		},
		NewSubscriber: func(t *testing.T, group string) brokertest.Subscriber {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := outboxnats.NewSubscriber(ctx, outboxnats.SubscriberConfig{
				URL: url, Group: group, Topic: "transfer.done", RedeliveryDelay: 100 * time.Millisecond,
			})
			if err != nil {
				t.Fatalf("NewSubscriber: %v", err)
			}
			return s
		},
	}
}

// natsSpec is a nats-server with JetStream, killed on Restart as in a crash.
var natsSpec = privateSpec{
	name: "nats-server", env: "OUTBOX_NATS_SERVER", bin: "/usr/sbin/nats-server",
	args: func(port int, dir string) []string {
		return []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", dir}
	},
}

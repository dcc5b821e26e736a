package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxmqtt"
	"github.com/outbox-go/outbox/brokertest"
)

// TestMQTT runs the scenario through MQTT 5 on a private mosquitto (its own
// port and persistence directory), which Restart stops with SIGTERM (so that
// it saves its sessions) and starts again.
func TestMQTT(t *testing.T) {
	srv := startPrivate(t, mosquittoSpec)
	b := mqttBroker("mqtt://" + srv.addr() + "?topic=e2e/{topic}")
	b.Restart = func(t *testing.T) { srv.restart(t) }
	Run(t, b)
}

// mqttBroker publishes and subscribes through the MQTT broker at url; the
// subscriber is one member with a persistent session, so that what the
// broker queues while it is away waits for it.
func mqttBroker(url string) Broker {
	return Broker{
		Name:  "mqtt",
		Topic: "transfer.done",
		NewPublisher: func(t *testing.T) outbox.Publisher {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := outboxmqtt.NewPublisher(ctx, outboxmqtt.PublisherConfig{URL: url})
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			return p
		},
		NewSubscriber: func(t *testing.T, group string) brokertest.Subscriber {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := outboxmqtt.NewSubscriber(ctx, outboxmqtt.SubscriberConfig{
				URL: url, Group: group, Name: "member-1", Topic: "transfer.done",
				// A member handles one message at a time and waits out the
				// delay after a failure before the next message (MQTT has no
				// nack): with the harness failing about one delivery in
				// eight, 100ms would hold it at ~60 messages/s, and a
				// minute of chaos would take longer than the run to drain.
				RedeliveryDelay: 10 * time.Millisecond, SessionExpiry: 10 * time.Minute,
			})
			if err != nil {
				t.Fatalf("NewSubscriber: %v", err)
			}
			return s
		},
	}
}

// mosquittoSpec is a mosquitto with persistence, stopped with SIGTERM (on
// which it writes its sessions, subscriptions and queued messages) on
// Restart.
var mosquittoSpec = privateSpec{
	name: "mosquitto", env: "OUTBOX_MOSQUITTO", bin: "/usr/sbin/mosquitto",
	args: func(_ int, dir string) []string { return []string{"-c", filepath.Join(dir, "m.conf")} },
	setup: func(t *testing.T, port int, dir string) {
		// user root: started as root, mosquitto switches to the mosquitto user,
		// which cannot write the test's temporary directory, and then loses its
		// persistence file on the restart (the setting does nothing for others).
		// max_queued_messages 0: mosquitto otherwise drops, after acking them,
		// the messages of a subscriber more than 1000 behind (see the
		// outboxmqtt package documentation).
		// acl_file: every client may read and write every topic; the chaos
		// run takes writing away for a while (mqttRefusal).
		conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\nuser root\npersistence true\npersistence_location %s/\nset_tcp_nodelay true\nmax_queued_messages 0\nlog_dest file %s\nacl_file %s\n",
			port, dir, filepath.Join(dir, "mosquitto.log"), filepath.Join(dir, "acl"))
		if err := os.WriteFile(filepath.Join(dir, "m.conf"), []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "acl"), []byte("topic readwrite #\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	},
	log: "mosquitto.log", term: true,
}

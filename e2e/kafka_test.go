package e2e

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
	"github.com/outbox-go/outbox/brokertest"
)

// TestKafka runs the scenario through Kafka. The broker is kfake, franz-go's
// in-process implementation of the Kafka protocol (there is no Kafka server
// on this machine), on a fixed port with its log in a directory of the test,
// so that Restart closes it and starts a new cluster on the same port that
// reloads the same topics, records and committed offsets. kfake has one
// process for its three brokers: the restart stops them all at once, which
// is harsher than a rolling restart of a real cluster.
func TestKafka(t *testing.T) {
	kc := startKafkaCluster(t)
	const topic = "transfer.done"
	url := kc.url() + "?topic=e2e.{topic}&timeout=5s"
	kc.createTopic(t, "e2e."+topic, 4)
	Run(t, Broker{
		Name:  "kafka",
		Topic: topic,
		NewPublisher: func(t *testing.T) outbox.Publisher {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := outboxkafka.NewPublisher(ctx, outboxkafka.PublisherConfig{URL: url})
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			return p
		},
		NewSubscriber: func(t *testing.T, group string) brokertest.Subscriber {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := outboxkafka.NewSubscriber(ctx, outboxkafka.SubscriberConfig{
				URL: url, Group: group, Topics: []string{topic}, RetryBackoff: 50 * time.Millisecond,
				// A failed record holds its partition for the delay; the
				// harness fails about one delivery in eight.
				RedeliveryDelay: 10 * time.Millisecond,
			})
			if err != nil {
				t.Fatalf("NewSubscriber: %v", err)
			}
			return s
		},
		Restart: func(t *testing.T) { kc.restart(t) },
	})
}

// kafkaCluster is a kfake cluster that can be restarted on its port and data.
type kafkaCluster struct {
	ports []int
	dir   string
	mu    sync.Mutex
	c     *kfake.Cluster
}

func startKafkaCluster(t *testing.T) *kafkaCluster {
	t.Helper()
	kc := &kafkaCluster{dir: t.TempDir()}
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		kc.ports = append(kc.ports, l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
	kc.start(t)
	t.Cleanup(kc.stop)
	return kc
}

func (kc *kafkaCluster) url() string {
	u := "kafka://"
	for i, p := range kc.ports {
		if i > 0 {
			u += ","
		}
		u += fmt.Sprintf("127.0.0.1:%d", p)
	}
	return u
}

func (kc *kafkaCluster) start(t *testing.T) {
	t.Helper()
	var err error
	for range 50 { // a port just closed may take a moment to be free again
		var c *kfake.Cluster
		if c, err = kfake.NewCluster(kfake.Ports(kc.ports...), kfake.DataDir(kc.dir), kfake.SyncWrites()); err == nil {
			kc.mu.Lock()
			kc.c = c
			kc.mu.Unlock()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("starting kfake on ports %v: %v", kc.ports, err)
}

func (kc *kafkaCluster) stop() {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if kc.c != nil {
		kc.c.Close()
		kc.c = nil
	}
}

func (kc *kafkaCluster) restart(t *testing.T) {
	kc.stop()
	kc.start(t)
}

func (kc *kafkaCluster) createTopic(t *testing.T, name string, partitions int32) {
	t.Helper()
	kc.mu.Lock()
	addrs := kc.c.ListenAddrs()
	kc.mu.Unlock()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, -1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("creating topic %s: %v", name, err)
	}
}

package outboxkafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
	"github.com/outbox-go/outbox/brokertest"
)

// brokerURL is the URL of the cluster TestMain starts: kfake, franz-go's
// in-process implementation of the Kafka protocol, is the Kafka broker of
// these tests (there is no Kafka server on the machine).
var brokerURL string

func TestMain(m *testing.M) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot start the kfake Kafka cluster the tests need: %v\n", err)
		os.Exit(1)
	}
	brokerURL = "kafka://" + strings.Join(cluster.ListenAddrs(), ",")
	code := m.Run()
	cluster.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var topicSeq atomic.Int64

// newTopic creates a topic of its own for a test on the cluster at url.
func newTopic(t testing.TB, url string, partitions int32) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()), topicSeq.Add(1))
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, name)
	createTopic(t, url, name, partitions)
	return name
}

// createTopic creates topic name on the cluster at url.
func createTopic(t testing.TB, url, name string, partitions int32) {
	t.Helper()
	createTopicWith(t, url, name, partitions, nil)
}

// createTopicWith creates topic name with the topic configs given.
func createTopicWith(t testing.TB, url, name string, partitions int32, configs map[string]*string) {
	t.Helper()
	adm, ctx := admin(t, url)
	resp, err := adm.CreateTopic(ctx, partitions, -1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("creating topic %s: %v", name, err)
	}
}

// admin returns an admin client of the cluster at url, and a context of 10
// seconds for its calls; both end with the test.
func admin(t testing.TB, url string) (*kadm.Client, context.Context) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(strings.TrimPrefix(url, "kafka://"), ",")...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return kadm.NewClient(cl), ctx
}

func newPublisher(t testing.TB, cfg outboxkafka.PublisherConfig) *outboxkafka.Publisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := outboxkafka.NewPublisher(ctx, cfg)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func newSubscriber(t testing.TB, cfg outboxkafka.SubscriberConfig) *outboxkafka.Subscriber {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := outboxkafka.NewSubscriber(ctx, cfg)
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// testLogger sends the adapter's log to the test's output, shown with -v or
// when the test fails.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// freePort returns a port nobody listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestConformance(t *testing.T) { brokertest.Run(t, conformanceEnv()) }

// TestBackoff runs the redelivery checks on the conformance suite's setup.
func TestBackoff(t *testing.T) {
	setup := conformanceEnv().Setup
	brokertest.RunBackoff(t, brokertest.BackoffEnv{
		Setup: setup,
		NewSubscriber: func(t *testing.T, b *brokertest.Bundle, o brokertest.BackoffOptions) brokertest.Subscriber {
			cfg, _ := subConfigs.Load(b)
			return newSubscriber(t, cfg.(func(brokertest.BackoffOptions) outboxkafka.SubscriberConfig)(o))
		},
	})
}

func conformanceEnv() brokertest.Env {
	return brokertest.Env{
		Features: brokertest.Features{
			Ordered:     true, // the key picks the partition; a partition is consumed in order
			Dedup:       false,
			DeadLetter:  true,
			SharedGroup: true,
			// A member that stops leaves the group; the rebalance gives its
			// partitions to the others, from the committed offsets.
			HandOver: true,
		},
		Setup: func(t *testing.T) *brokertest.Bundle {
			topic := newTopic(t, brokerURL, 4)
			log := testLogger(t)
			pub := newPublisher(t, outboxkafka.PublisherConfig{URL: brokerURL, Logger: log})
			subCfg := func(o brokertest.BackoffOptions) outboxkafka.SubscriberConfig {
				return outboxkafka.SubscriberConfig{
					URL: brokerURL, Group: o.Group, Topics: []string{topic},
					MaxDeliveries: o.MaxDeliveries, RetryBackoff: 10 * time.Millisecond, Logger: log,
					RedeliveryDelay: o.RedeliveryDelay, RedeliveryDelayMax: o.RedeliveryDelayMax, DeadLetterAfter: o.DeadLetterAfter,
					// The shortest session kfake allows (as Kafka's
					// group.min.session.timeout.ms): a killed member's
					// partitions move to the others after it.
					SessionTimeout: 6 * time.Second,
				}
			}
			var kills sync.Map // *outboxkafka.Subscriber -> its kill func
			b := &brokertest.Bundle{
				Publisher: pub,
				Topic:     topic,
				NewSubscriber: func(t *testing.T, opts brokertest.SubscriberOptions) brokertest.Subscriber {
					cfg, kill := outboxkafka.Killable(subCfg(quickRedelivery(opts.Group, opts.MaxDeliveries)))
					sub := newSubscriber(t, cfg)
					kills.Store(sub, kill)
					return sub
				},
				// A crash: the member's connections are cut and it can make
				// no more, so it neither commits nor leaves the group; its
				// partitions move when its session times out.
				Kill: func(sub brokertest.Subscriber) {
					kill, _ := kills.Load(sub)
					kill.(func())()
				},
				Unreachable: func(t *testing.T) outbox.Publisher {
					// NewPublisher insists on a broker that answers, so the
					// publisher is made against a private cluster that is
					// then stopped.
					c, err := kfake.NewCluster(kfake.NumBrokers(1))
					if err != nil {
						t.Fatal(err)
					}
					p := newPublisher(t, outboxkafka.PublisherConfig{URL: "kafka://" + c.ListenAddrs()[0], DialTimeout: time.Second})
					c.Close()
					return p
				},
				Refused: func() outbox.Message {
					big := `{"big":"` + strings.Repeat("x", outboxkafka.DefaultMaxMessageBytes) + `"}`
					return outbox.Message{MsgID: "too-large", Topic: topic, Payload: json.RawMessage(big)}
				},
				Undeliverable: func() []outbox.Message {
					return []outbox.Message{
						// A record over MaxMessageBytes by its headers.
						{MsgID: "big-header", Topic: topic, Payload: json.RawMessage(`{}`),
							Headers: map[string]string{"big": strings.Repeat("x", outboxkafka.DefaultMaxMessageBytes)}},
						// Not a Kafka topic name: a tab, and over 249 bytes.
						{MsgID: "tab-topic", Topic: topic + "\tx", Payload: json.RawMessage(`{}`)},
						{MsgID: "long-topic", Topic: strings.Repeat("t", 250), Payload: json.RawMessage(`{}`)},
					}
				},
				DeadLetters: func(ctx context.Context, group string) ([]outbox.Message, error) {
					dls, err := outboxkafka.DeadLetters(ctx, subCfg(brokertest.BackoffOptions{Group: group}))
					if err != nil {
						return nil, err
					}
					msgs := make([]outbox.Message, len(dls))
					for i, d := range dls {
						msgs[i] = d.Message
					}
					return msgs, nil
				},
			}
			subConfigs.Store(b, subCfg)
			return b
		},
	}
}

// subConfigs maps each conformance Bundle to its subscribers' config.
var subConfigs sync.Map // *brokertest.Bundle -> func(brokertest.BackoffOptions) outboxkafka.SubscriberConfig

// quickRedelivery is the conformance suite's redelivery: short delays, and
// the dead-letter topic at the maxDeliveries-th failure.
func quickRedelivery(group string, maxDeliveries int) brokertest.BackoffOptions {
	return brokertest.BackoffOptions{Group: group, MaxDeliveries: maxDeliveries,
		RedeliveryDelay: 10 * time.Millisecond, RedeliveryDelayMax: 100 * time.Millisecond, DeadLetterAfter: time.Millisecond}
}

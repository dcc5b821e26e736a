package main

import (
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/clitest"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
	"github.com/outbox-go/outbox/broker/outboxkafka"
	"github.com/outbox-go/outbox/broker/outboxmqtt"
	"github.com/outbox-go/outbox/broker/outboxnats"
	"github.com/outbox-go/outbox/broker/outboxredis"
)

// subscriber is what every broker module's Subscriber is.
type subscriber interface {
	Run(ctx context.Context, h outbox.Handler) error
	Close() error
}

// The binary relays through each broker: `outbox relay --broker <URL>
// --workers 2` publishes sidecar rows, and the broker module's subscriber
// receives every one of them. The services are the machine's (kfake, in this
// process, for Kafka); destinations are fresh names per run.
func TestRelayThroughEachBroker(t *testing.T) {
	t.Parallel()
	const topic = "order.paid"
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, sfx string) (url string, sub subscriber)
	}{
		{"nats", func(t *testing.T, sfx string) (string, subscriber) {
			url := fmt.Sprintf("nats://127.0.0.1:4222?subject=cli%s.{topic}&stream=CLI_%s&max_age=10m", sfx, sfx)
			t.Cleanup(func() { clitest.DeleteStreams("nats://127.0.0.1:4222", "CLI_"+sfx, "CLI_DEAD_"+sfx) })
			p, err := outboxnats.NewPublisher(t.Context(), outboxnats.PublisherConfig{URL: url}) // creates the stream
			if err != nil {
				t.Fatalf("NATS with JetStream must run on 127.0.0.1:4222: %v", err)
			}
			p.Close()
			sub, err := outboxnats.NewSubscriber(t.Context(), outboxnats.SubscriberConfig{URL: url, Group: "cli",
				DeadLetterSubject: "clidead" + sfx + ".{group}", DeadLetterStream: "CLI_DEAD_" + sfx})
			if err != nil {
				t.Fatal(err)
			}
			return url, sub
		}},
		{"redis", func(t *testing.T, sfx string) (string, subscriber) {
			url := "redis://127.0.0.1:6379/0?stream=cli" + sfx + ":{topic}"
			sub, err := outboxredis.NewSubscriber(t.Context(), outboxredis.SubscriberConfig{URL: url, Group: "cli", Topic: topic})
			if err != nil {
				t.Fatalf("Redis must run on 127.0.0.1:6379: %v", err)
			}
			t.Cleanup(func() {
				rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
				defer rdb.Close()
				rdb.Del(context.Background(), "cli"+sfx+":"+topic)
			})
			return url, sub
		}},
		{"amqp", func(t *testing.T, sfx string) (string, subscriber) {
			url := "amqp://guest:guest@127.0.0.1:5672/?exchange=cli" + sfx
			sub, err := outboxamqp.NewSubscriber(t.Context(), outboxamqp.SubscriberConfig{URL: url, Group: "cli" + sfx})
			if err != nil {
				t.Fatalf("RabbitMQ must run on 127.0.0.1:5672: %v", err)
			}
			t.Cleanup(func() {
				conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
				if err != nil {
					return
				}
				defer conn.Close()
				if ch, err := conn.Channel(); err == nil {
					_, _ = ch.QueueDelete("cli"+sfx, false, false, false)
					_, _ = ch.QueueDelete("cli"+sfx+".dead", false, false, false)
					_ = ch.ExchangeDelete("cli"+sfx, false, false)
				}
			})
			return url, sub
		}},
		{"mqtt", func(t *testing.T, sfx string) (string, subscriber) {
			url := "mqtt://127.0.0.1:1883?topic=cli" + sfx + "/{topic}"
			sub, err := outboxmqtt.NewSubscriber(t.Context(), outboxmqtt.SubscriberConfig{URL: url, Group: "cli" + sfx, Topic: topic})
			if err != nil {
				t.Fatalf("Mosquitto must run on 127.0.0.1:1883: %v", err)
			}
			t.Cleanup(func() { _ = sub.Leave(context.Background()) })
			return url, sub
		}},
		{"kafka", func(t *testing.T, sfx string) (string, subscriber) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			url := "kafka://" + strings.Join(c.ListenAddrs(), ",") + "?auto_create=true"
			sub, err := outboxkafka.NewSubscriber(t.Context(), outboxkafka.SubscriberConfig{URL: url, Group: "cli", Topics: []string{topic}})
			if err != nil {
				t.Fatal(err)
			}
			return url, sub
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newSQLite(t)
			mustRun(t, "migrate", "--db", b.dsn)
			url, sub := tc.setup(t, clitest.RandomHex())
			defer sub.Close()
			const n = 60
			for i := range n {
				b.insert(t, fmt.Sprintf("%s-%02d", tc.name, i), topic, fmt.Sprintf(`{"n":%d}`, i))
			}
			stop := startRelay(t, nil, "--db", b.dsn, "--broker", url, "--workers", "2", "--batch", "10", "--interval", "20ms")
			waitFor(t, "all rows SENT", time.Minute, func() bool { return b.count(t, "status = 1") == n })
			if r := stop(); r.code != 0 {
				t.Fatalf("relay --broker %s: %s", tc.name, r)
			}

			var mu sync.Mutex
			got := map[string]outbox.Message{}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- sub.Run(ctx, func(_ context.Context, m outbox.Message) error {
					mu.Lock()
					defer mu.Unlock()
					got[m.MsgID] = m
					if len(got) == n {
						cancel()
					}
					return nil
				})
			}()
			if err := <-done; err != nil {
				t.Fatalf("subscriber: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != n {
				t.Fatalf("the subscriber received %d of %d messages", len(got), n)
			}
			if m := got[tc.name+"-07"]; m.Topic != topic || string(m.Payload) != `{"n":7}` {
				t.Errorf("message %s-07 arrived as %+v", tc.name, m)
			}
		})
	}
}

// TestSourceFromBrokerURL: a broker URL's source parameter sets the
// CloudEvents source when --source is not given; --source (or OUTBOX_SOURCE)
// wins over it; without either, it is "/outbox". Before, the flag's default
// "/outbox" always won and the URL's parameter was ignored.
func TestSourceFromBrokerURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, param string
		args, env   []string
		want        string
	}{
		{"url", "&source=/shop", nil, nil, "/shop"},
		{"flag wins", "&source=/shop", []string{"--source", "/cli"}, nil, "/cli"},
		{"variable wins", "&source=/shop", nil, []string{"OUTBOX_SOURCE=/env"}, "/env"},
		{"default", "", nil, nil, "/outbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			b := newSQLite(t)
			mustRun(t, "migrate", "--db", b.dsn)
			b.insert(t, "src-1", "order.paid", `{"n":1}`)
			url := "kafka://" + c.ListenAddrs()[0] + "?auto_create=true" + tc.param
			stop := startRelay(t, tc.env, append([]string{"--db", b.dsn, "--broker", url, "--interval", "20ms"}, tc.args...)...)
			waitFor(t, "the row SENT", time.Minute, func() bool { return b.count(t, "status = 1") == 1 })
			if r := stop(); r.code != 0 {
				t.Fatalf("relay: %s", r)
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("order.paid"),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for {
				fs := cl.PollFetches(ctx)
				if ctx.Err() != nil {
					t.Fatal("no record arrived")
				}
				if r := fs.Records(); len(r) > 0 {
					for _, h := range r[0].Headers {
						if h.Key == "ce_source" {
							if string(h.Value) != tc.want {
								t.Fatalf("ce_source %q, want %q", h.Value, tc.want)
							}
							return
						}
					}
					t.Fatalf("the record has no ce_source header: %v", r[0].Headers)
				}
			}
		})
	}
}

package outboxredis

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/brokertest"
)

// testMinIdle is the subscribers' MinIdle in tests: the pause before the
// entries of a subscriber that died come back.
const testMinIdle = 200 * time.Millisecond

func TestConformance(t *testing.T) { brokertest.Run(t, conformanceEnv(sharedClient(t))) }

func TestBackoff(t *testing.T) {
	brokertest.RunBackoff(t, brokertest.BackoffEnv{
		Setup: conformanceEnv(sharedClient(t)).Setup,
		NewSubscriber: func(t *testing.T, b *brokertest.Bundle, o brokertest.BackoffOptions) brokertest.Subscriber {
			subscribe, _ := subscribers.Load(b)
			return subscribe.(func(*testing.T, brokertest.BackoffOptions) brokertest.Subscriber)(t, o)
		},
	})
}

// subscribers maps each Bundle of conformanceEnv to its subscriber constructor.
var subscribers sync.Map // *brokertest.Bundle -> func(*testing.T, brokertest.BackoffOptions) brokertest.Subscriber

func conformanceEnv(rdb *redis.Client) brokertest.Env {
	return brokertest.Env{
		Features: brokertest.Features{
			Ordered:     true,
			Dedup:       false,
			DeadLetter:  true,
			SharedGroup: true,
			// Another consumer of the group claims an entry left pending
			// for MinIdle (XAUTOCLAIM).
			HandOver: true,
		},
		Setup: func(t *testing.T) *brokertest.Bundle {
			prefix := uniquePrefix(t, rdb)
			template := prefix + ":{topic}"
			const topic = "order.paid"
			ctx := context.Background()
			pub, err := NewPublisher(ctx, PublisherConfig{URL: sharedURL, Stream: template})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = pub.Close() })
			// The refused message's stream key holds a string.
			refusedTopic := "refused"
			if err := rdb.Set(ctx, streamKey(template, refusedTopic), "not a stream", 0).Err(); err != nil {
				t.Fatal(err)
			}
			subscribe := func(t *testing.T, o brokertest.BackoffOptions) brokertest.Subscriber {
				sub, err := NewSubscriber(ctx, SubscriberConfig{
					URL:                sharedURL,
					Group:              o.Group,
					Topic:              topic,
					Stream:             template,
					MaxDeliveries:      o.MaxDeliveries,
					RedeliveryDelay:    o.RedeliveryDelay,
					RedeliveryDelayMax: o.RedeliveryDelayMax,
					DeadLetterAfter:    o.DeadLetterAfter,
					MinIdle:            testMinIdle,
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sub.Close() })
				return sub
			}
			b := &brokertest.Bundle{
				Publisher: pub,
				Topic:     topic,
				// opts.RedeliverAfter is not used: testMinIdle is shorter.
				NewSubscriber: func(t *testing.T, opts brokertest.SubscriberOptions) brokertest.Subscriber {
					// Short delays, and the dead-letter stream at the
					// MaxDeliveries-th failure.
					return subscribe(t, brokertest.BackoffOptions{Group: opts.Group, MaxDeliveries: opts.MaxDeliveries,
						RedeliveryDelay: 10 * time.Millisecond, RedeliveryDelayMax: 100 * time.Millisecond, DeadLetterAfter: time.Millisecond})
				},
				Unreachable: func(t *testing.T) outbox.Publisher {
					// A publisher built while its server ran, whose server
					// is gone now: nothing listens on its port.
					srv := startServer(t)
					p, err := NewPublisher(ctx, PublisherConfig{URL: srv.URL(""), Stream: template})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = p.Close() })
					srv.stop()
					return p
				},
				// Close closes the client under a running Run: the entries
				// in hand stay pending, no longer kept fresh, and another
				// consumer claims them after MinIdle.
				Kill: func(sub brokertest.Subscriber) { _ = sub.(*Subscriber).Close() },
				Refused: func() outbox.Message {
					return outbox.Message{MsgID: "refused-1", Topic: refusedTopic, Payload: []byte(`{}`)}
				},
				DeadLetters: func(ctx context.Context, group string) ([]outbox.Message, error) {
					stream := streamKey(template, topic)
					dead, err := readDeadLetters(ctx, rdb, deadKey(DefaultDeadLetterStream, stream, group, topic), 0)
					if err != nil {
						return nil, err
					}
					msgs := make([]outbox.Message, 0, len(dead))
					for _, d := range dead {
						if d.DecodeErr != nil {
							t.Errorf("dead letter %s is not an event: %v", d.ID, d.DecodeErr)
						}
						msgs = append(msgs, d.Message)
					}
					return msgs, nil
				},
			}
			subscribers.Store(b, subscribe)
			return b
		},
	}
}

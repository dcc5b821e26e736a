package outboxredis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

// TestConcurrencyByKey: with Concurrency 8, 20 keys × 20 messages reach the
// handler with each key's messages one at a time and in publish order, keys
// in parallel; a message that fails twice is redelivered before the rest of
// its key, while the other keys go on. With the default Concurrency of 1,
// one message is in hand at a time.
func TestConcurrencyByKey(t *testing.T) {
	t.Parallel()
	for _, conc := range []int{1, 8} {
		t.Run(fmt.Sprintf("concurrency=%d", conc), func(t *testing.T) {
			t.Parallel()
			rdb := sharedClient(t)
			template := uniquePrefix(t, rdb) + ":{topic}"
			pub := newTestPublisher(t, PublisherConfig{Stream: template})
			sub := newTestSubscriber(t, SubscriberConfig{Stream: template, Topic: "t", Group: "g", Concurrency: conc, BatchSize: 100})
			var msgs []outbox.Message
			for i := range 400 {
				msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("m-%d", i), Key: fmt.Sprintf("k-%d", i%20),
					Topic: "t", Payload: []byte(`{}`)})
			}
			var mu sync.Mutex
			order := map[string][]string{}
			busy := map[string]bool{}
			failures := map[string]int{}
			inHand, most, done := 0, 0, 0
			all := make(chan struct{})
			h := func(ctx context.Context, m outbox.Message) error {
				mu.Lock()
				if busy[m.Key] {
					t.Errorf("key %s handled twice at once", m.Key)
				}
				busy[m.Key] = true
				inHand++
				most = max(most, inHand)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				defer mu.Unlock()
				busy[m.Key] = false
				inHand--
				if m.MsgID == "m-45" && failures[m.MsgID] < 2 {
					failures[m.MsgID]++
					return errors.New("failing twice")
				}
				order[m.Key] = append(order[m.Key], m.MsgID)
				if done++; done == len(msgs) {
					close(all)
				}
				return nil
			}
			running(t, sub, h)
			for start := 0; start < len(msgs); start += 100 {
				if errs := pub.Publish(context.Background(), msgs[start:start+100]); errs != nil {
					t.Fatal(errs)
				}
			}
			select {
			case <-all:
			case <-time.After(60 * time.Second):
				t.Fatalf("handled %d of %d messages", done, len(msgs))
			}
			mu.Lock()
			defer mu.Unlock()
			for k := range 20 {
				key := fmt.Sprintf("k-%d", k)
				var want []string
				for i := k; i < len(msgs); i += 20 {
					want = append(want, fmt.Sprintf("m-%d", i))
				}
				if !slices.Equal(order[key], want) {
					t.Errorf("key %s handled as %v, want %v", key, order[key], want)
				}
			}
			switch {
			case conc == 1 && most != 1:
				t.Errorf("Concurrency 1: %d messages in hand at once", most)
			case conc > 1 && most < 2:
				t.Errorf("Concurrency %d: never more than one message in hand", conc)
			}
			t.Logf("Concurrency %d: at most %d messages in hand at once", conc, most)
		})
	}
}

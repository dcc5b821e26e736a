package brokertest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/outbox-go/outbox"
)

func (s *suite) testPublishEmpty(t *testing.T) {
	b := s.env.Setup(t)
	if errs := b.Publisher.Publish(context.Background(), nil); errs != nil {
		t.Fatalf("Publish(nil) = %v, want nil", errs)
	}
}

// testRoundTrip: every attribute a row carries arrives as it left.
func (s *suite) testRoundTrip(t *testing.T) {
	b := s.env.Setup(t)
	msgs := messages(b.Topic, "rt", 10, 3)
	msgs[0].Key = ""
	msgs[1].Headers = nil
	msgs[2].Payload = json.RawMessage(`"just a string"`)
	msgs[3].Payload = json.RawMessage(`[]`)
	msgs[4].MsgID = "order-42:OrderPaid/ü " + msgs[4].MsgID

	rec := newRecorder()
	sub := s.subscriber(t, b, "rt")
	s.publish(t, b.Publisher, msgs)
	s.run(t, sub, rec.handler())
	rec.waitSucceeded(t, s.env.Timeout, msgs)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, want := range msgs {
		got := rec.received[want.MsgID]
		if got.Topic != want.Topic || got.Key != want.Key || !got.CreatedAt.Equal(want.CreatedAt) {
			t.Errorf("%s: got topic %q key %q time %s, want %q %q %s",
				want.MsgID, got.Topic, got.Key, got.CreatedAt, want.Topic, want.Key, want.CreatedAt)
		}
		if !jsonEqual(got.Payload, want.Payload) {
			t.Errorf("%s: payload %s, want %s", want.MsgID, got.Payload, want.Payload)
		}
		if !maps.Equal(got.Headers, want.Headers) && (len(got.Headers) != 0 || len(want.Headers) != 0) {
			t.Errorf("%s: headers %v, want %v", want.MsgID, got.Headers, want.Headers)
		}
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// testPipelinedBatches: batches of the relay's default size, all acked, and
// each handled successfully once (a second success would mean an ack was
// lost on a healthy broker).
func (s *suite) testPipelinedBatches(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	sub := s.subscriber(t, b, "batches")
	s.run(t, sub, rec.handler())
	msgs := messages(b.Topic, "pb", 2000, 16)
	for i := 0; i < len(msgs); i += 500 {
		s.publish(t, b.Publisher, msgs[i:i+500])
	}
	rec.waitSucceeded(t, s.env.Timeout, msgs)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	redelivered := 0
	for _, m := range msgs {
		if rec.succeeded[m.MsgID] != 1 {
			t.Errorf("%s handled successfully %d times, want 1", m.MsgID, rec.succeeded[m.MsgID])
		}
		if rec.deliveries[m.MsgID] > 1 {
			redelivered++
		}
	}
	if redelivered > 0 {
		t.Logf("%d of %d messages were delivered more than once (allowed: at least once)", redelivered, len(msgs))
	}
}

// testConcurrentPublish: one Publisher used by several relays at once.
func (s *suite) testConcurrentPublish(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	sub := s.subscriber(t, b, "concurrent")
	s.run(t, sub, rec.handler())
	var all []outbox.Message
	var wg sync.WaitGroup
	for g := range 4 {
		msgs := messages(b.Topic, fmt.Sprintf("cp%d", g), 200, 4)
		all = append(all, msgs...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), s.env.Timeout)
			defer cancel()
			for i, err := range b.Publisher.Publish(ctx, msgs) {
				if err != nil {
					t.Errorf("concurrent Publish: %s: %v", msgs[i].MsgID, err)
				}
			}
		}()
	}
	wg.Wait()
	rec.waitSucceeded(t, s.env.Timeout, all)
}

// testOrderPerKey: one subscriber sees each key's messages in batch order.
// A broker without Features.Ordered must still deliver every message of
// two batches of interleaved keys; only the order goes unchecked.
func (s *suite) testOrderPerKey(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	sub := s.subscriber(t, b, "order")
	s.run(t, sub, rec.handler())
	msgs := messages(b.Topic, "ord", 600, 3)
	s.publish(t, b.Publisher, msgs[:300])
	s.publish(t, b.Publisher, msgs[300:])
	s.checkKeyOrder(t, rec, msgs)
}

// testOrderManyKeys: 20 keys × 20 messages, interleaved, published in
// batches of 40 (each batch holds two messages of every key) reach one
// subscriber of a group with each key's messages in publish order.
func (s *suite) testOrderManyKeys(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	sub := s.subscriber(t, b, "manykeys")
	s.run(t, sub, rec.handler())
	msgs := messages(b.Topic, "mk", 400, 20)
	for start := 0; start < len(msgs); start += 40 {
		s.publish(t, b.Publisher, msgs[start:start+40])
	}
	s.checkKeyOrder(t, rec, msgs)
}

// checkKeyOrder waits until every message of msgs succeeded and, with
// Features.Ordered, checks that each key's messages arrived in msgs' order.
func (s *suite) checkKeyOrder(t *testing.T, rec *recorder, msgs []outbox.Message) {
	t.Helper()
	rec.waitSucceeded(t, s.env.Timeout, msgs)
	if !s.env.Features.Ordered {
		t.Log("Features.Ordered is false: every message arrived; their order is not checked")
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := map[string][]string{}
	for _, m := range msgs {
		want[m.Key] = append(want[m.Key], m.MsgID)
	}
	for key, ids := range want {
		if !slices.Equal(rec.order[key], ids) {
			t.Errorf("key %s arrived out of order: %v", key, firstDiff(rec.order[key], ids))
		}
	}
}

func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("position %d is %s, want %s", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("%d messages, want %d", len(got), len(want))
}

// testDuplicatePublish: the relay publishes a batch again (a crash between
// publish and mark). A broker with Features.Dedup drops the copies: each
// message reaches the handler once, which is checked after a marker
// published later was handled (a copy that got through would have arrived
// by then on the brokers here, which deliver a stream in order to one
// subscriber). Without it, both copies of every message reach the handler;
// that they cause one effect is the inbox's job, tested in e2e.
func (s *suite) testDuplicatePublish(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	sub := s.subscriber(t, b, "dup")
	s.run(t, sub, rec.handler())
	msgs := messages(b.Topic, "dup", 50, 5)
	s.publish(t, b.Publisher, msgs)
	s.publish(t, b.Publisher, msgs)
	marker := messages(b.Topic, "dup-marker", 1, 0)
	s.publish(t, b.Publisher, marker)
	rec.waitSucceeded(t, s.env.Timeout, append(slices.Clone(msgs), marker...))
	if !s.env.Features.Dedup {
		rec.waitFor(t, s.env.Timeout, "both copies of every message to be handled", func() bool {
			for _, m := range msgs {
				if rec.succeeded[m.MsgID] < 2 {
					return false
				}
			}
			return true
		})
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, m := range msgs {
		if n := rec.deliveries[m.MsgID]; n != 1 {
			t.Errorf("%s delivered %d times; the broker should have dropped the copy (Features.Dedup)", m.MsgID, n)
		}
	}
}

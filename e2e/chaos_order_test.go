//go:build chaos

package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxredis"
)

// storedCopy is where a message's first copy sits in the broker's stream,
// and how many copies the stream holds (more than one: a publish retried
// after the broker's duplicate window).
type storedCopy struct {
	seq    uint64
	copies int
}

// natsStreamOrder reads every message of stream at addr, in stream sequence
// order, and returns each msg_id's first copy.
func natsStreamOrder(ctx context.Context, addr, stream string) (map[string]storedCopy, error) {
	nc, err := nats.Connect("nats://"+addr, nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	out := map[string]storedCopy{}
	for {
		batch, err := c.FetchNoWait(500)
		if err != nil {
			return nil, err
		}
		n := 0
		var last uint64
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			last = md.Sequence.Stream
			id := m.Headers().Get("Nats-Msg-Id")
			sc, ok := out[id]
			if !ok {
				sc.seq = last
			}
			sc.copies++
			out[id] = sc
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, err
		}
		if last >= info.State.LastSeq {
			return out, nil
		}
		if n == 0 {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// redisStreamOrder reads every entry of stream at addr, in entry id order,
// and returns each msg_id's first copy; seq is the entry's place in the
// stream (its id's order).
func redisStreamOrder(ctx context.Context, addr, stream string) (map[string]storedCopy, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	out := map[string]storedCopy{}
	var seq uint64
	start := "-"
	for {
		entries, err := c.XRangeN(ctx, stream, start, "+", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("XRANGE %s: %w", stream, err)
		}
		for _, e := range entries {
			seq++
			id, _ := e.Values[outboxredis.AttributePrefix+"id"].(string)
			sc, ok := out[id]
			if !ok {
				sc.seq = seq
			}
			sc.copies++
			out[id] = sc
		}
		if len(entries) < 1000 {
			return out, nil
		}
		start = "(" + entries[len(entries)-1].ID
	}
}

// TestChaosOrderKinds checks that the order check tells a publish-order
// violation (stored out of id order) from a delivery reorder (stored in
// order, arrived out of it).
func TestChaosOrderKinds(t *testing.T) {
	o := newKeyOrder()
	for i, id := range []string{"a1", "a2", "b1", "b2"} {
		o.committed(id, int64(i+1))
	}
	for _, id := range []string{"a2", "a1", "b2", "b1"} { // both keys arrive out of order
		o.delivered(&o.watcher, outbox.Message{MsgID: id, Key: id[:1]})
	}
	// a is stored in order (a delivery reorder), b out of it (the relay's).
	stored := map[string]storedCopy{"a1": {1, 1}, "a2": {2, 2}, "b2": {3, 1}, "b1": {4, 1}}
	_, _, _, arrival := o.violations(&o.watcher)
	if len(arrival) != 2 {
		t.Fatalf("arrival violations %v, want 2", arrival)
	}
	published, copies := o.streamViolations(stored)
	if len(published) != 1 || published[0].msgID != "b1" || published[0].after != "b2" || copies != 1 {
		t.Fatalf("publish-order violations %v (copies %d), want b1 after b2 (1)", published, copies)
	}
}

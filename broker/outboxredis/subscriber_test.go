package outboxredis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
)

func newTestSubscriber(t *testing.T, cfg SubscriberConfig) *Subscriber {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = sharedURL
	}
	if cfg.MinIdle == 0 {
		cfg.MinIdle = testMinIdle
	}
	if cfg.RedeliveryDelay == 0 && cfg.DeadLetterAfter == 0 {
		// Short delays, and the dead-letter stream at the
		// MaxDeliveries-th failure.
		cfg.RedeliveryDelay, cfg.RedeliveryDelayMax, cfg.DeadLetterAfter = 10*time.Millisecond, 100*time.Millisecond, time.Millisecond
	}
	sub, err := NewSubscriber(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// running runs sub with h and returns a stop function that checks Run's
// result.
func running(t *testing.T, sub *Subscriber, h outbox.Handler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx, h) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v, want nil", err)
				}
			case <-time.After(20 * time.Second):
				t.Error("Run did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// collector records the msg_ids a handler saw.
type collector struct {
	mu   sync.Mutex
	seen map[string]int
}

func newCollector() *collector { return &collector{seen: map[string]int{}} }

func (c *collector) handler(ctx context.Context, m outbox.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[m.MsgID]++
	return nil
}

func (c *collector) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[id]
}

func (c *collector) waitFor(t *testing.T, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		missing := ""
		for _, id := range ids {
			if c.count(id) == 0 {
				missing = id
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testMessages(prefix string, n int, topic string) ([]outbox.Message, []string) {
	msgs := make([]outbox.Message, n)
	ids := make([]string, n)
	for i := range msgs {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		msgs[i] = outbox.Message{MsgID: ids[i], Topic: topic, Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	return msgs, ids
}

// TestSubscriberSurvivesRestart: a running subscriber goes on consuming
// after Redis restarts; what was published before and after arrives.
func TestSubscriberSurvivesRestart(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	pub := newTestPublisher(t, PublisherConfig{URL: srv.URL("")})
	sub := newTestSubscriber(t, SubscriberConfig{URL: srv.URL(""), Group: "g", Topic: "t"})
	c := newCollector()
	stop := running(t, sub, c.handler)
	ctx := context.Background()
	before, beforeIDs := testMessages("before", 50, "t")
	if errs := pub.Publish(ctx, before); errs != nil {
		t.Fatal(errs)
	}
	c.waitFor(t, beforeIDs...)
	srv.restart()
	after, afterIDs := testMessages("after", 50, "t")
	deadline := time.Now().Add(10 * time.Second)
	for errs := pub.Publish(ctx, after); errs != nil; errs = pub.Publish(ctx, after) {
		if time.Now().After(deadline) {
			t.Fatalf("Publish after the restart: %v", errs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.waitFor(t, afterIDs...)
	stop()
}

// TestSubscriberRecreatesGroup: when the stream and its group vanish (a
// restart without persistence), the subscriber creates the group again and
// gets what is published afterwards.
func TestSubscriberRecreatesGroup(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	prefix := uniquePrefix(t, rdb)
	template := prefix + ":{topic}"
	pub := newTestPublisher(t, PublisherConfig{Stream: template})
	sub := newTestSubscriber(t, SubscriberConfig{Stream: template, Group: "g", Topic: "t"})
	c := newCollector()
	running(t, sub, c.handler)
	ctx := context.Background()
	first, firstIDs := testMessages("first", 3, "t")
	if errs := pub.Publish(ctx, first); errs != nil {
		t.Fatal(errs)
	}
	c.waitFor(t, firstIDs...)
	if err := rdb.Del(ctx, sub.Stream()).Err(); err != nil {
		t.Fatal(err)
	}
	second, secondIDs := testMessages("second", 3, "t")
	if errs := pub.Publish(ctx, second); errs != nil {
		t.Fatal(errs)
	}
	c.waitFor(t, secondIDs...)
}

// TestNotAnEvent: an entry that is not an outbox event goes to the
// dead-letter stream at once, with why, and never reaches the handler.
func TestNotAnEvent(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	prefix := uniquePrefix(t, rdb)
	sub := newTestSubscriber(t, SubscriberConfig{Stream: prefix + ":{topic}", Group: "g", Topic: "t"})
	ctx := context.Background()
	id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: sub.Stream(), Values: []any{"foo", "bar"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Bool
	running(t, sub, func(context.Context, outbox.Message) error { handled.Store(true); return nil })
	dead := waitDead(t, sub, 1)
	d := dead[0]
	if !errors.Is(d.DecodeErr, cloudevents.ErrNotEvent) || !strings.Contains(d.Reason, "no id attribute") ||
		d.EntryID != id || d.Stream != sub.Stream() || d.Deliveries != 1 || d.Fields["foo"] != "bar" || d.Fields[FieldDeadGroup] != "g" {
		t.Errorf("dead letter %+v", d)
	}
	if handled.Load() {
		t.Error("the handler was called for an entry that is not an event")
	}
	if p, _ := rdb.XPending(ctx, sub.Stream(), "g").Result(); p.Count != 0 {
		t.Errorf("%d entries still pending", p.Count)
	}
}

func waitDead(t *testing.T, sub *Subscriber, n int) []DeadLetter {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		dead, err := sub.DeadLetters(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) >= n {
			return dead
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead-letter stream %s holds %d entries, want %d", sub.DeadLetterStream(), len(dead), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOverDeliveredGoesDead: an entry that a dead consumer already had as
// often as MaxDeliveries allows is dead-lettered without a further delivery.
func TestOverDeliveredGoesDead(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	prefix := uniquePrefix(t, rdb)
	template := prefix + ":{topic}"
	pub := newTestPublisher(t, PublisherConfig{Stream: template})
	sub := newTestSubscriber(t, SubscriberConfig{Stream: template, Group: "g", Topic: "t", MaxDeliveries: 3})
	ctx := context.Background()
	msgs, _ := testMessages("over", 1, "t")
	if errs := pub.Publish(ctx, msgs); errs != nil {
		t.Fatal(errs)
	}
	// A consumer that took the entry three times and died.
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "ghost", Streams: []string{sub.Stream(), ">"}, Count: 1, Block: -1}).Result()
	if err != nil || len(res[0].Messages) != 1 {
		t.Fatalf("XREADGROUP: %v %v", res, err)
	}
	if err := rdb.Do(ctx, "XCLAIM", sub.Stream(), "g", "ghost", 0, res[0].Messages[0].ID, "RETRYCOUNT", 3, "JUSTID").Err(); err != nil {
		t.Fatal(err)
	}
	c := newCollector()
	running(t, sub, c.handler)
	dead := waitDead(t, sub, 1)
	if c.count("over-0") != 0 {
		t.Error("the handler got an entry already delivered MaxDeliveries times")
	}
	if d := dead[0]; d.Message.MsgID != "over-0" || d.Deliveries != 4 || !strings.Contains(d.Reason, "over MaxDeliveries (3)") {
		t.Errorf("dead letter %+v", d)
	}
}

// TestStopReleasesUnhandled: entries read but not handed to the handler
// when Run stops go back to the group at once, without a delivery spent,
// and the next subscriber gets them.
func TestStopReleasesUnhandled(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	prefix := uniquePrefix(t, rdb)
	template := prefix + ":{topic}"
	pub := newTestPublisher(t, PublisherConfig{Stream: template})
	const minIdle = 10 * time.Second
	sub1 := newTestSubscriber(t, SubscriberConfig{Stream: template, Group: "g", Topic: "t", MinIdle: minIdle, Block: 10 * time.Millisecond})
	ctx := context.Background()
	msgs, ids := testMessages("rel", 5, "t")
	if errs := pub.Publish(ctx, msgs); errs != nil {
		t.Fatal(errs)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var got []string
	err := sub1.Run(runCtx, func(ctx context.Context, m outbox.Message) error {
		got = append(got, m.MsgID)
		cancel() // stop after this one
		return nil
	})
	if err != nil || len(got) != 1 || got[0] != ids[0] {
		t.Fatalf("Run: %v, handled %v", err, got)
	}
	pend, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: sub1.Stream(), Group: "g", Start: "-", End: "+", Count: 10}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(pend) != 4 {
		t.Fatalf("%d entries pending after the stop, want the 4 unhandled ones", len(pend))
	}
	for _, p := range pend {
		if p.RetryCount != 0 || p.Idle < minIdle {
			t.Errorf("released entry %s: delivery count %d, idle %s; want 0 and at least %s", p.ID, p.RetryCount, p.Idle, minIdle)
		}
	}
	sub2 := newTestSubscriber(t, SubscriberConfig{Stream: template, Group: "g", Topic: "t", MinIdle: minIdle})
	c := newCollector()
	start := time.Now()
	running(t, sub2, c.handler)
	c.waitFor(t, ids[1:]...)
	if elapsed := time.Since(start); elapsed > minIdle/2 {
		t.Errorf("the released entries took %s to come back", elapsed)
	}
	if c.count(ids[0]) != 0 {
		t.Errorf("the message acked before the stop came again")
	}
}

// TestSlowHandlerKeepsEntry: while a handler runs longer than MinIdle, no
// other subscriber of the group reclaims its entry.
func TestSlowHandlerKeepsEntry(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	prefix := uniquePrefix(t, rdb)
	template := prefix + ":{topic}"
	pub := newTestPublisher(t, PublisherConfig{Stream: template})
	var mu sync.Mutex
	deliveries := 0
	h := func(ctx context.Context, m outbox.Message) error {
		mu.Lock()
		deliveries++
		mu.Unlock()
		time.Sleep(5 * testMinIdle)
		return nil
	}
	sub1 := newTestSubscriber(t, SubscriberConfig{Stream: template, Group: "g", Topic: "t"})
	sub2 := newTestSubscriber(t, SubscriberConfig{Stream: template, Group: "g", Topic: "t"})
	stop1 := running(t, sub1, h)
	stop2 := running(t, sub2, h)
	msgs, _ := testMessages("slow", 1, "t")
	if errs := pub.Publish(context.Background(), msgs); errs != nil {
		t.Fatal(errs)
	}
	time.Sleep(8 * testMinIdle)
	stop1()
	stop2()
	if deliveries != 1 {
		t.Errorf("the slow message was delivered %d times, want 1", deliveries)
	}
	if p, _ := rdb.XPending(context.Background(), sub1.Stream(), "g").Result(); p.Count != 0 {
		t.Errorf("%d entries still pending", p.Count)
	}
	// Both consumers held nothing when they stopped: they are gone.
	if cs, _ := rdb.XInfoConsumers(context.Background(), sub1.Stream(), "g").Result(); len(cs) != 0 {
		t.Errorf("consumers left in the group: %v", cs)
	}
}

// TestEntriesReadAheadKeptClaimed: the entries of one read wait their turn
// behind the handler; however long they wait, no other subscriber of the
// group reclaims them as idle (each handler call here is shorter than
// MinIdle/2, the batch together several times MinIdle).
func TestEntriesReadAheadKeptClaimed(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	prefix := uniquePrefix(t, rdb)
	template := prefix + ":{topic}"
	pub := newTestPublisher(t, PublisherConfig{Stream: template})
	const n = 8
	var mu sync.Mutex
	handled := map[string]int{}
	started := make(chan struct{})
	var once sync.Once
	h := func(ctx context.Context, m outbox.Message) error {
		once.Do(func() { close(started) })
		mu.Lock()
		handled[m.MsgID]++
		mu.Unlock()
		time.Sleep(testMinIdle * 2 / 5)
		return nil
	}
	sub1 := newTestSubscriber(t, SubscriberConfig{Stream: template, Group: "g", Topic: "t", BatchSize: n})
	sub2 := newTestSubscriber(t, SubscriberConfig{Stream: template, Group: "g", Topic: "t", BatchSize: n})
	msgs, _ := testMessages("ahead", n, "t")
	if errs := pub.Publish(context.Background(), msgs); errs != nil {
		t.Fatal(errs)
	}
	stop1 := running(t, sub1, h) // reads all n at once
	<-started
	stop2 := running(t, sub2, h)
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		done := len(handled)
		mu.Unlock()
		if done == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(2 * testMinIdle)
	stop1()
	stop2()
	mu.Lock()
	defer mu.Unlock()
	for _, m := range msgs {
		if handled[m.MsgID] != 1 {
			t.Errorf("%s handled %d times, want 1 (all: %v)", m.MsgID, handled[m.MsgID], handled)
		}
	}
}

// TestStopTimeout: the handler in hand keeps its context for StopTimeout
// after Run's context ended, and then loses it.
func TestStopTimeout(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	prefix := uniquePrefix(t, rdb)
	template := prefix + ":{topic}"
	pub := newTestPublisher(t, PublisherConfig{Stream: template})
	sub := newTestSubscriber(t, SubscriberConfig{Stream: template, Group: "g", Topic: "t", StopTimeout: 300 * time.Millisecond})
	entered := make(chan struct{})
	var waited time.Duration
	var hctxErr error
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(ctx, func(hctx context.Context, m outbox.Message) error {
			close(entered)
			<-ctx.Done()
			start := time.Now()
			<-hctx.Done()
			waited, hctxErr = time.Since(start), hctx.Err()
			return hctx.Err()
		})
	}()
	msgs, _ := testMessages("stop", 1, "t")
	if errs := pub.Publish(context.Background(), msgs); errs != nil {
		t.Fatal(errs)
	}
	<-entered
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !errors.Is(hctxErr, context.Canceled) || waited < 250*time.Millisecond {
		t.Errorf("handler context ended %s after the stop with %v, want about 300ms", waited, hctxErr)
	}
}

func TestRunMisuse(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	prefix := uniquePrefix(t, rdb)
	sub := newTestSubscriber(t, SubscriberConfig{Stream: prefix + ":{topic}", Group: "g", Topic: "t"})
	if err := sub.Run(context.Background(), nil); err == nil {
		t.Error("Run with a nil handler: no error")
	}
	c := newCollector()
	stop := running(t, sub, c.handler)
	time.Sleep(50 * time.Millisecond)
	if err := sub.Run(context.Background(), c.handler); !errors.Is(err, ErrAlreadyRunning) {
		t.Errorf("second Run: %v, want ErrAlreadyRunning", err)
	}
	stop()
	_ = sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sub.Run(ctx, c.handler); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Run after Close: %v, want an error that says it was closed", err)
	}
}

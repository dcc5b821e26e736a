package drivertest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// keySink is a publisher that records, per key, the row ids it acked, in the
// order it acked them. fail names messages refused that many times before
// they are acked.
type keySink struct {
	mu    sync.Mutex
	acked map[string][]int64
	fail  map[string]int
	tries map[string]int
	// retried holds the RetriedHeader of each acked message that had one.
	retried map[string]string
}

func newKeySink(fail map[string]int) *keySink {
	return &keySink{acked: map[string][]int64{}, fail: fail, tries: map[string]int{}, retried: map[string]string{}}
}

// publisher returns the sink as a Publisher that sends one message at a time
// and holds back a key's later messages after a failure in the batch
// (outbox.PublishFunc), with a pause per batch so that two relays overlap.
func (k *keySink) publisher() outbox.Publisher {
	one := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.tries[m.MsgID]++
		if k.tries[m.MsgID] <= k.fail[m.MsgID] {
			return fmt.Errorf("refused on purpose, attempt %d", k.tries[m.MsgID])
		}
		k.acked[m.Key] = append(k.acked[m.Key], m.ID)
		if v, ok := m.Headers[outbox.RetriedHeader]; ok {
			k.retried[m.MsgID] = v
		}
		return nil
	})
	return outbox.BatchPublishFunc(func(ctx context.Context, msgs []outbox.Message) []error {
		time.Sleep(time.Millisecond)
		return one.Publish(ctx, msgs)
	})
}

// check fails t unless every key's acks are its rows' ids in increasing
// order, each once, want of them per key.
func (k *keySink) check(t *testing.T, keys []string, want int) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	violations := 0
	for _, key := range keys {
		ids := k.acked[key]
		if len(ids) != want {
			t.Errorf("key %s: %d acks, want %d", key, len(ids), want)
		}
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				violations++
				if violations <= 5 {
					t.Errorf("key %s: id %d published after id %d", key, ids[i], ids[i-1])
				}
			}
		}
	}
	if violations > 0 {
		t.Errorf("%d per-key order violations in all", violations)
	}
}

// keyedMsgs returns perKey messages of each key, interleaved: the first of
// every key, then the second of every key, and so on, so that a key's
// messages spread over many batches.
func keyedMsgs(prefix string, keys []string, perKey int) []outbox.Message {
	var out []outbox.Message
	for i := range perKey {
		for _, k := range keys {
			out = append(out, outbox.Message{MsgID: fmt.Sprintf("%s-%s-%03d", prefix, k, i), Topic: "test.keyed", Key: k,
				Payload: json.RawMessage(`{}`)})
		}
	}
	return out
}

func keyNames(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return keys
}

// runRelays runs n relays with Run until total rows are SENT.
func (s suite[TTx]) runRelays(t *testing.T, env *Env[TTx], n int, pub outbox.Publisher, cfg outbox.RelayConfig, total int64) {
	t.Helper()
	s.runRelaysUntil(t, env, n, pub, cfg, total, 0)
}

// runRelaysUntil is runRelays that also waits for dead rows to be DEAD.
func (s suite[TTx]) runRelaysUntil(t *testing.T, env *Env[TTx], n int, pub outbox.Publisher, cfg outbox.RelayConfig, total, dead int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	var wg sync.WaitGroup
	for range n {
		r := newRelay(t, env.Driver, pub, cfg)
		wg.Go(func() {
			if err := r.Run(ctx); err != nil {
				t.Errorf("relay: %v", err)
			}
		})
	}
	defer wg.Wait()
	defer cancel()
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		if s.count(t, env, "status = 1") >= total && (dead == 0 || s.count(t, env, "status = 2") >= dead) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("after 45s, %d of %d rows SENT, %d of %d DEAD", s.count(t, env, "status = 1"), total, s.count(t, env, "status = 2"), dead)
	if pending, err := env.Driver.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusNew}); err == nil {
		for _, m := range pending {
			t.Logf("NEW: id %d %s key %q retries %d next_retry_at %s (in %s) last_error %q",
				m.ID, m.MsgID, m.Key, m.Retries, m.NextRetryAt.Format(time.RFC3339Nano), time.Until(m.NextRetryAt).Round(time.Millisecond), m.LastError)
		}
	}
}

// testKeyOrder: the messages of one key are published in id order across
// batches and relays, a failing message holds back only its own key, and
// messages without a key flow beside them.
func (s suite[TTx]) testKeyOrder(t *testing.T) {
	t.Run("ClaimAhead", s.testKeyOrderClaimAhead)
	t.Run("FailingOneRelay", s.testKeyOrderFailingOneRelay)
	t.Run("FailingMessageTwoRelays", s.testKeyOrderFailing)
	t.Run("DeadFlowsOn", s.testKeyOrderDead)
	t.Run("NoStarvation", s.testKeyOrderNoStarvation)
}

// keyedBacklog sets up a table holding 40 messages of each of 50 keys
// (keyedMsgs), and returns it, the keys and the messages.
func (s suite[TTx]) keyedBacklog(t *testing.T, prefix string) (*Env[TTx], []string, []outbox.Message) {
	env := s.setup(t)
	keys := keyNames("k", 50)
	msgs := keyedMsgs(prefix, keys, 40)
	s.write(t, env, msgs...)
	return env, keys, msgs
}

// testKeyOrderClaimAhead: nothing fails, one relay claims ahead (Run) in
// batches of 20 over 50 keys of 40 messages each.
func (s suite[TTx]) testKeyOrderClaimAhead(t *testing.T) {
	t.Parallel()
	env, keys, msgs := s.keyedBacklog(t, "ahead")
	sink := newKeySink(nil)
	s.runRelays(t, env, 1, sink.publisher(), outbox.RelayConfig{BatchSize: 20, Interval: 10 * time.Millisecond,
		RescanInterval: 30 * time.Millisecond}, int64(len(msgs)))
	sink.check(t, keys, 40)
}

// wholeSpy is a store that counts the claims that can tell where they
// began (outboxdriver.ClaimSpan) and the hold-back checks the relay asked
// for with HoldParams.Whole, which look only at requeued and DEAD rows.
type wholeSpy struct {
	outboxdriver.Store
	spans, whole, checks atomic.Int64
}

func (w *wholeSpy) Claim(ctx context.Context, p outboxdriver.ClaimParams) (outboxdriver.Claim, error) {
	c, err := w.Store.Claim(ctx, p)
	if cs, ok := c.(outboxdriver.ClaimSpan); ok && err == nil {
		if _, ok := cs.SpanFrom(); ok {
			w.spans.Add(1)
		}
	}
	return c, err
}

func (w *wholeSpy) HoldBack(ctx context.Context, msgs []outbox.Message, p outboxdriver.HoldParams) ([]bool, error) {
	w.checks.Add(1)
	if p.Whole {
		w.whole.Add(1)
	}
	return w.Store.(outboxdriver.KeyOrderer).HoldBack(ctx, msgs, p)
}

func (w *wholeSpy) ClaimOverlap() outboxdriver.ClaimOverlap {
	if o, ok := w.Store.(outboxdriver.ClaimOverlapper); ok {
		return o.ClaimOverlap()
	}
	return outboxdriver.OverlapAll
}

// testKeyOrderFailingOneRelay: one relay, claiming ahead in batches of 20
// over 50 keys of 40 messages, three of them refused three times each. Where
// the store's claims tell where they began, the relay skips the per-key
// walk while its claims hold every id since the low-water mark, and must
// still hold back the keys behind the failing messages.
func (s suite[TTx]) testKeyOrderFailingOneRelay(t *testing.T) {
	t.Parallel()
	env, keys, msgs := s.keyedBacklog(t, "one")
	sink := newKeySink(map[string]int{"one-k03-005": 3, "one-k17-012": 3, "one-k40-030": 3})
	spy := &wholeSpy{Store: env.Driver}
	cfg := outbox.RelayConfig{BatchSize: 20, Interval: 10 * time.Millisecond, RescanInterval: 30 * time.Millisecond,
		RetryBase: 50 * time.Millisecond, RetryMax: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(ctxT(t))
	r := newRelay(t, spy, sink.publisher(), cfg)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(45 * time.Second)
	for s.count(t, env, "status = 1") < int64(len(msgs)) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("relay: %v", err)
	}
	sink.check(t, keys, 40)
	sink.mu.Lock()
	for _, id := range []string{"one-k03-005", "one-k17-012", "one-k40-030"} {
		if got := sink.tries[id]; got != 4 {
			t.Errorf("%s was tried %d times, want 4", id, got)
		}
	}
	sink.mu.Unlock()
	t.Logf("%d claims told where they began; %d of %d hold-back checks with Whole", spy.spans.Load(), spy.whole.Load(), spy.checks.Load())
	if spy.spans.Load() > 0 && spy.whole.Load() == 0 {
		t.Errorf("no hold-back check with Whole: the case did not reach the relay's shortcut")
	}
}

// testKeyOrderFailing: a key whose fifth message is refused three times
// before it goes, two relays, 50 other keys and unkeyed messages flowing
// meanwhile.
func (s suite[TTx]) testKeyOrderFailing(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	keys := append(keyNames("k", 50), "hot")
	msgs := keyedMsgs("fail", keys, 40)
	unkeyed := manyMsgs("free", 200)
	// The unkeyed rows come between the keyed ones, in id order.
	var all []outbox.Message
	for i, m := range msgs {
		all = append(all, m)
		if i%10 == 0 && len(unkeyed) > 0 {
			all, unkeyed = append(all, unkeyed[0]), unkeyed[1:]
		}
	}
	all = append(all, unkeyed...)
	s.write(t, env, all...)
	sink := newKeySink(map[string]int{"fail-hot-004": 3})
	start := time.Now()
	s.runRelays(t, env, 2, sink.publisher(), outbox.RelayConfig{BatchSize: 20, Interval: 10 * time.Millisecond,
		RescanInterval: 30 * time.Millisecond, RetryBase: 100 * time.Millisecond, RetryMax: 200 * time.Millisecond},
		int64(len(all)))
	sink.check(t, keys, 40)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if got := sink.tries["fail-hot-004"]; got != 4 {
		t.Errorf("the failing message was tried %d times, want 4", got)
	}
	if got := len(sink.acked[""]); got != 200 {
		t.Errorf("%d unkeyed messages acked, want 200", got)
	}
	t.Logf("%d messages in %s", len(all), time.Since(start).Round(time.Millisecond))
}

// testKeyOrderDead: once the message a key waits for goes DEAD, the rest of
// the key flows on; with StopKeyAtDead it waits until the DEAD message is
// retried, and then goes after it.
func (s suite[TTx]) testKeyOrderDead(t *testing.T) {
	t.Parallel()
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprintf("StopKeyAtDead=%v", stop), func(t *testing.T) {
			t.Parallel()
			env := s.setup(t)
			ctx := ctxT(t)
			keys := []string{"a", "b"}
			msgs := keyedMsgs("dead", keys, 5)
			s.write(t, env, msgs...)
			// dead-a-001 is refused twice: with MaxRetries 2 it goes DEAD.
			sink := newKeySink(map[string]int{"dead-a-001": 2})
			cfg := outbox.RelayConfig{BatchSize: 3, MaxRetries: 2, RetryBase: time.Millisecond, RetryMax: time.Millisecond,
				Interval: 5 * time.Millisecond, RescanInterval: 5 * time.Millisecond, StopKeyAtDead: stop}
			if stop {
				s.runRelaysUntil(t, env, 1, sink.publisher(), cfg, 6, 1) // a's first and every b; a's second DEAD
				if n := s.count(t, env, "status = 0"); n != 3 {
					t.Fatalf("%d rows NEW behind the DEAD one, want 3", n)
				}
				if _, err := env.Driver.RetryDead(ctx, outbox.DeadFilter{MsgIDs: []string{"dead-a-001"}}, "retried: "); err != nil {
					t.Fatal(err)
				}
			}
			s.runRelays(t, env, 1, sink.publisher(), cfg, map[bool]int64{false: 9, true: 10}[stop])
			want := []string{"dead-a-000", "dead-a-002", "dead-a-003", "dead-a-004"}
			if stop {
				want = []string{"dead-a-000", "dead-a-001", "dead-a-002", "dead-a-003", "dead-a-004"}
			}
			sink.mu.Lock()
			got := sink.acked["a"]
			sink.mu.Unlock()
			if len(got) != len(want) || !sort.SliceIsSorted(got, func(i, j int) bool { return got[i] < got[j] }) {
				t.Fatalf("key a acked ids %v, want the ids of %v in order", got, want)
			}
			if stop {
				sink.mu.Lock()
				defer sink.mu.Unlock()
				v := sink.retried["dead-a-001"]
				if when, err := time.Parse(time.RFC3339Nano, v); err != nil || time.Since(when).Abs() > time.Hour {
					t.Errorf("the retried message's %s header = %q (%v), want the time of the retry", outbox.RetriedHeader, v, err)
				}
				if len(sink.retried) != 1 {
					t.Errorf("messages with a %s header: %v, want only dead-a-001", outbox.RetriedHeader, sink.retried)
				}
				return
			}
			dead, err := env.Driver.GetMessage(ctx, "dead-a-001")
			if err != nil || dead.Status != outbox.StatusDead {
				t.Fatalf("dead-a-001: status %v, %v; want DEAD", dead.Status, err)
			}
		})
	}
}

// heldCounter is a BatchHook that counts the messages held back behind an
// earlier message of their key.
type heldCounter struct {
	mu   sync.Mutex
	held int
}

func (h *heldCounter) OnBatch(_ context.Context, rep outbox.BatchReport) {
	h.mu.Lock()
	h.held += rep.HeldBack
	h.mu.Unlock()
}

// testKeyOrderNoStarvation: a hot key with a backlog of 1,000 messages
// behind one that keeps failing does not fill the claims: the 50 other
// keys' messages, written after the backlog, all go, and each held message
// is claimed and held about once (it waits until its blocker is SENT or
// DEAD), not at every rescan nor at every retry of its blocker.
func (s suite[TTx]) testKeyOrderNoStarvation(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	hot := keyedMsgs("starve", []string{"hot"}, 1001)
	keys := keyNames("k", 50)
	others := keyedMsgs("starve", keys, 10)
	s.write(t, env, hot...)
	s.write(t, env, others...)
	sink := newKeySink(map[string]int{"starve-hot-000": 1 << 30})
	count := &heldCounter{}
	start := time.Now()
	s.runRelays(t, env, 2, sink.publisher(), outbox.RelayConfig{BatchSize: 50, Interval: 5 * time.Millisecond,
		RescanInterval: 20 * time.Millisecond, RetryBase: 2 * time.Second, RetryMax: 2 * time.Second, MaxRetries: 1000,
		Hooks: []any{count}}, int64(len(others)))
	took := time.Since(start)
	sink.check(t, keys, 10)
	count.mu.Lock()
	defer count.mu.Unlock()
	// A message held behind the blocker in its backoff waits until the
	// blocker is SENT or DEAD (or the hold wait of 10s runs out); one held
	// while its blocker is in the other relay's hands is due again at once,
	// so the first attempt's window can cost a few holds per message.
	// Claimed at every rescan, each would be held some fifty times a second.
	if max := 3000 * (1 + int(took/(2*time.Second))); count.held > max {
		t.Errorf("%d messages held in %s, want at most %d: held messages are claimed again before their blocker is due", count.held, took, max)
	}
	if n := s.count(t, env, "status = 0"); n != 1001 {
		t.Errorf("%d rows NEW, want the hot key's 1001", n)
	}
	t.Logf("the other keys' %d messages in %s; %d messages held", len(others), took.Round(time.Millisecond), count.held)
}

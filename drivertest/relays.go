package drivertest

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

func (s suite[TTx]) testTwoRelays(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	const n = 3000
	s.write(t, env, manyMsgs("two", n)...)
	var mu sync.Mutex
	seen := map[string]int{}
	var slowdown atomic.Bool
	pub := func(name string) outbox.Publisher {
		return outbox.BatchPublishFunc(func(_ context.Context, msgs []outbox.Message) []error {
			mu.Lock()
			for _, m := range msgs {
				seen[m.MsgID]++
			}
			mu.Unlock()
			if slowdown.Load() {
				time.Sleep(time.Millisecond)
			}
			return nil
		})
	}
	slowdown.Store(true)
	var wg sync.WaitGroup
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	reports := make([]int, 2)
	for i := range 2 {
		r := newRelay(t, env.Driver, pub(fmt.Sprint(i)), outbox.RelayConfig{BatchSize: 50, Interval: 10 * time.Millisecond})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				rep, err := r.RunOnce(runCtx)
				if err != nil && runCtx.Err() == nil {
					t.Errorf("relay %d: %v", i, err)
					return
				}
				reports[i] += rep.Sent
				if len(rep.Results) == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if reports[0] == 0 || reports[1] == 0 {
		t.Logf("one relay did all the work: %v", reports)
	}
	if len(seen) != n {
		t.Fatalf("published %d distinct messages, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("%s published %d times by two relays", id, c)
		}
	}
	if got := s.count(t, env, "status = 1"); got != n {
		t.Fatalf("SENT = %d, want %d", got, n)
	}
}

func (s suite[TTx]) testLateCommit(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	w, _ := outbox.NewWriter(env.Driver, outbox.WriterConfig{})
	rec := &recorder{}
	r := newRelay(t, env.Driver, rec, outbox.RelayConfig{})
	if !env.ConcurrentWriters {
		// Writers take turns: a relay that arrives while a writer's transaction
		// is open waits for it and then sees its row.
		tx, _ := env.Begin(ctx)
		if err := w.Write(ctx, tx, msg("slow")); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := r.RunOnce(ctx); done <- err }()
		time.Sleep(200 * time.Millisecond)
		if err := env.Commit(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		drain(t, r)
		if len(rec.seen) != 1 || rec.seen["slow"] != 1 {
			t.Fatalf("published %v", rec.seen)
		}
		return
	}
	// A long transaction takes a low id, later ones commit first and are
	// relayed; the long one commits last and must not be skipped.
	slow, err := env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, slow, msg("slow")); err != nil {
		t.Fatal(err)
	}
	s.write(t, env, msg("fast-1"), msg("fast-2"))
	drain(t, r)
	if rec.seen["fast-2"] != 1 || rec.seen["slow"] != 0 {
		t.Fatalf("before the slow commit: %v", rec.seen)
	}
	if err := env.Commit(ctx, slow); err != nil {
		t.Fatal(err)
	}
	s.write(t, env, msg("fast-3"))
	drain(t, r)
	if rec.seen["slow"] != 1 || rec.seen["fast-3"] != 1 {
		t.Fatalf("late commit skipped: %v", rec.seen)
	}
	slowMsg, _ := env.Driver.GetMessage(ctx, "slow")
	fast, _ := env.Driver.GetMessage(ctx, "fast-2")
	if slowMsg.ID > fast.ID {
		t.Fatalf("test did not exercise a late commit: slow id %d > fast id %d", slowMsg.ID, fast.ID)
	}
}

// testWriterBesideClaims: a relay's claim stays open while the broker has
// the batch, and business transactions must go on meanwhile. On InnoDB at
// REPEATABLE READ the claim's next-key locks covered the gap where every new
// row goes: writers waited for the whole publish, and a mark that reached a
// waiting writer's new row deadlocked it (found by make chaos CHAOS_DB=mysql).
// Two claims are open, one from the start and one from a cursor, as with two
// relays; a writer commits; then both claims mark and commit.
func (s suite[TTx]) testWriterBesideClaims(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("claimed", 4)...)
	first, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 2, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Abort(context.WithoutCancel(ctx))
	if len(first.Messages()) != 2 {
		t.Fatalf("first claim: %d messages, want 2", len(first.Messages()))
	}
	second, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, AfterID: first.Messages()[1].ID, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Abort(context.WithoutCancel(ctx))
	// PostgreSQL locks chunks of ids, so the second claim may find the rest
	// held by the first.
	if n := len(second.Messages()); n > 2 {
		t.Fatalf("second claim (from a cursor): %d messages, want at most 2", n)
	}
	left := map[string]bool{"written-beside-claims": true, "claimed-00002": true, "claimed-00003": true}
	for _, m := range second.Messages() {
		delete(left, m.MsgID)
	}

	done := make(chan error, 1)
	go func() { done <- s.writeTx(ctx, env, msg("written-beside-claims")) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a business transaction beside open claims: %v", err)
		}
	case <-time.After(5 * time.Second):
		_ = first.Abort(context.WithoutCancel(ctx))
		_ = second.Abort(context.WithoutCancel(ctx))
		<-done
		t.Fatal("a business transaction waited more than 5s for the relay's open claims")
	}
	sent := func(c outboxdriver.Claim) []outbox.Outcome { return make([]outbox.Outcome, len(c.Messages())) } // OutcomeSent is 0
	if err := first.Finish(ctx, sent(first)); err != nil {
		t.Fatalf("mark of the first claim: %v", err)
	}
	if err := second.Finish(ctx, sent(second)); err != nil {
		t.Fatalf("mark of the second claim: %v", err)
	}
	third, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer third.Abort(context.WithoutCancel(ctx))
	got := map[string]bool{}
	for _, m := range third.Messages() {
		got[m.MsgID] = true
	}
	if !maps.Equal(got, left) {
		t.Fatalf("after both marks the claim found %v, want %v", got, left)
	}
}

// testCrash: the relay publishes, then dies before it marks. The rows are
// published again, and the consumer's inbox applies each once.
func (s suite[TTx]) testCrash(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("crash", 5)...)
	var deliveries []outbox.Message
	lease := 400 * time.Millisecond
	claim, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	deliveries = append(deliveries, claim.Messages()...) // published...
	// ...and the process dies: its lease runs out.
	if c2, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: lease}); err != nil || len(c2.Messages()) != 0 {
		t.Fatalf("leased rows were claimed again before the lease ran out: %v", err)
	}
	time.Sleep(lease + 100*time.Millisecond)
	if n := s.count(t, env, "status = 0 AND retries = 0"); n != 5 {
		t.Fatalf("after the crash: %d rows NEW with no retry spent, want 5", n)
	}
	rec := &recorder{}
	drain(t, newRelay(t, env.Driver, rec, outbox.RelayConfig{}))
	deliveries = append(deliveries, rec.got...)
	if len(deliveries) != 10 {
		t.Fatalf("%d deliveries, want 10 (each message twice)", len(deliveries))
	}
	// The consumer side, in the same database for the test.
	if err := env.Exec(ctx, "CREATE TABLE effects (msg_id VARCHAR(64) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	ib := outbox.NewInbox(env.Driver)
	applied := 0
	for _, m := range deliveries {
		ok, err := ib.Process(ctx, "billing", m.MsgID, func(ctx context.Context, tx TTx) error {
			return env.ExecTx(ctx, tx, "INSERT INTO effects (msg_id) VALUES (?)", m.MsgID)
		})
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			applied++
		}
	}
	if n, _ := env.QueryInt(ctx, "SELECT count(*) FROM effects"); applied != 5 || n != 5 {
		t.Fatalf("effects = %d (applied %d), want 5", n, applied)
	}
}

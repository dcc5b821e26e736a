package drivertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// testIdleInTxTimeout: the relay's connections are ended by the server when
// a transaction stays idle for a second (PostgreSQL's
// idle_in_transaction_session_timeout, MariaDB's idle_transaction_timeout),
// as managed databases and poolers do, and the broker takes two seconds per
// batch. A claim that held its transaction open across the publish lost it
// in every batch, its mark failed, and the relay published the same rows
// for ever. Every message goes out, at most twice, and ends SENT.
func (s suite[TTx]) testIdleInTxTimeout(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	const idle = time.Second
	var st outboxdriver.Store = env.Driver
	if env.IdleInTxTimeout != nil {
		var ended func(context.Context) error
		st, ended = env.IdleInTxTimeout(t, idle)
		// The setting must be in force, or the test proves nothing.
		if err := ended(ctx); err != nil {
			t.Fatalf("the server kept a transaction idle for longer than %s: %v", idle, err)
		}
	}
	const n = 10
	s.write(t, env, manyMsgs("idle", n)...)
	var mu sync.Mutex
	seen := map[string]int{}
	pub := outbox.BatchPublishFunc(func(ctx context.Context, msgs []outbox.Message) []error {
		time.Sleep(2 * idle)
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			seen[m.MsgID]++
		}
		return nil
	})
	r := newRelay(t, st, pub, outbox.RelayConfig{BatchSize: 5, PublishTimeout: 5 * time.Second, Interval: 50 * time.Millisecond})
	s.runUntilNoneNew(t, ctx, env, r, 30*time.Second)
	if got := s.count(t, env, "status = 1"); got != n {
		t.Fatalf("SENT = %d after 30 s, want %d", got, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("published %d distinct messages, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c > 2 {
			t.Fatalf("%s published %d times, want at most 2", id, c)
		}
	}
}

// testFailedFinishGivesUp: a Finish that fails (here its context is
// cancelled) records nothing and gives the claim up, so that its rows are
// due again at once, not when the minute's lease runs out.
func (s suite[TTx]) testFailedFinishGivesUp(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("giveup", 3)...)
	c, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Messages()) != 3 {
		t.Fatalf("claimed %d messages, want 3", len(c.Messages()))
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	sent := make([]outbox.Outcome, 3)
	if err := c.Finish(cancelled, sent); err == nil {
		t.Fatal("Finish with a cancelled context succeeded")
	}
	if n := s.count(t, env, "status = 0 AND retries = 0"); n != 3 {
		t.Fatalf("%d rows NEW and untouched after the failed Finish, want 3", n)
	}
	again, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Messages()) != 3 {
		again.Abort(context.WithoutCancel(ctx))
		t.Fatalf("after the failed Finish a claim got %d rows at once, want 3: the lease still held them", len(again.Messages()))
	}
	if err := again.Finish(ctx, sent); err != nil {
		t.Fatal(err)
	}
	if n := s.count(t, env, "status = 1"); n != 3 {
		t.Fatalf("SENT = %d, want 3", n)
	}
}

// testLeaseRunsOut: a relay's lease runs out while the broker still has its
// batch; another relay claims the rows, and the first relay's late Finish
// then marks SENT what it sent (status moves forward only), but neither
// spends a retry, makes DEAD nor releases a row the second relay holds, and
// the second relay's mark does not mark a row twice.
func (s suite[TTx]) testLeaseRunsOut(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("lease", 4)...)
	const lease = 500 * time.Millisecond
	first, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Messages()) != 4 {
		t.Fatalf("first claim: %d messages, want 4", len(first.Messages()))
	}
	held, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(held.Messages()) != 0 {
		t.Fatalf("a second relay claimed %d rows under a live lease", len(held.Messages()))
	}
	if err := held.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lease + 200*time.Millisecond)
	second, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Abort(context.WithoutCancel(ctx))
	if len(second.Messages()) != 4 {
		t.Fatalf("after the lease ran out another relay claimed %d rows, want 4", len(second.Messages()))
	}
	// The first relay comes back: one message went out, the others failed.
	late := []outbox.Outcome{
		{Kind: outbox.OutcomeSent},
		{Kind: outbox.OutcomeRetry, Delay: time.Hour, Error: "late retry"},
		{Kind: outbox.OutcomeDead, Error: "late dead"},
		{Kind: outbox.OutcomeRelease},
	}
	if err := first.Finish(ctx, late); err != nil {
		t.Fatalf("the late Finish: %v", err)
	}
	msgs := first.Messages()
	if n := s.count(t, env, "status = 1"); n != 1 {
		t.Fatalf("SENT = %d after the late Finish, want 1 (the row it sent)", n)
	}
	if n := s.count(t, env, "status = 0 AND retries = 0 AND last_error IS NULL"); n != 3 {
		t.Fatalf("%d rows NEW with no retry spent after the late Finish, want 3: it changed rows another relay holds", n)
	}
	before, err := env.Driver.GetMessage(ctx, msgs[0].MsgID)
	if err != nil {
		t.Fatal(err)
	}
	// The second relay's batch is still held: no third relay gets it,
	// although the late Finish released one of its rows.
	if c, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: time.Minute}); err != nil || len(c.Messages()) != 0 {
		t.Fatalf("a third claim beside the second relay's lease: %v, %v", c, err)
	} else if err := c.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := second.Finish(ctx, make([]outbox.Outcome, 4)); err != nil {
		t.Fatal(err)
	}
	if n := s.count(t, env, "status = 1 AND retries = 0"); n != 4 {
		t.Fatalf("SENT with no retry spent = %d, want 4", n)
	}
	after, err := env.Driver.GetMessage(ctx, msgs[0].MsgID)
	if err != nil {
		t.Fatal(err)
	}
	if !after.SentAt.Equal(before.SentAt) {
		t.Fatalf("%s was marked SENT twice: sent_at %s, then %s", msgs[0].MsgID, before.SentAt, after.SentAt)
	}
}

// testStatusSetBackByHand: an operator sets a SENT and a DEAD row back to NEW
// with plain SQL (UPDATE ... SET status = 0), after the relay has moved on
// past them (on PostgreSQL, the low-water mark has passed them). Both are
// published again. outbox dead retry stays the documented way.
func (s suite[TTx]) testStatusSetBackByHand(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, msg("hand-sent"), msg("hand-dead"))
	refuse := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		if m.MsgID == "hand-dead" {
			return fmt.Errorf("refused by test")
		}
		return nil
	})
	drain(t, newRelay(t, env.Driver, refuse, outbox.RelayConfig{MaxRetries: 1}))
	if n := s.count(t, env, "msg_id = 'hand-sent' AND status = 1"); n != 1 {
		t.Fatal("hand-sent is not SENT")
	}
	if n := s.count(t, env, "msg_id = 'hand-dead' AND status = 2"); n != 1 {
		t.Fatal("hand-dead is not DEAD")
	}
	dead, err := env.Driver.GetMessage(ctx, "hand-dead")
	if err != nil {
		t.Fatal(err)
	}
	// More rows pass through the relay, so that it has moved past these
	// two: rescans that sweep, on PostgreSQL past the low-water mark.
	rec := &recorder{}
	r := newRelay(t, env.Driver, rec, outbox.RelayConfig{BatchSize: 100})
	if env.Driver.Dialect() == "postgres" {
		// The mark advances once the transactions running at the sweep
		// before have ended, other tests' too.
		deadline := time.Now().Add(20 * time.Second)
		for i := 0; ; i++ {
			lwm, err := env.QueryInt(ctx, "SELECT lwm FROM outbox_horizon")
			if err != nil {
				t.Fatal(err)
			}
			if lwm >= dead.ID {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the low-water mark %d never passed id %d", lwm, dead.ID)
			}
			s.write(t, env, manyMsgs(fmt.Sprintf("pass%d", i), 5)...)
			drain(t, r)
			time.Sleep(50 * time.Millisecond)
		}
	} else {
		s.write(t, env, manyMsgs("pass", 50)...)
		drain(t, r)
	}
	if err := env.Exec(ctx, "UPDATE outbox SET status = 0 WHERE msg_id IN ('hand-sent', 'hand-dead')"); err != nil {
		t.Fatal(err)
	}
	drain(t, r)
	if rec.seen["hand-sent"] != 1 || rec.seen["hand-dead"] != 1 {
		t.Fatalf("rows set back to NEW by hand published %d and %d times, want 1 and 1",
			rec.seen["hand-sent"], rec.seen["hand-dead"])
	}
	if n := s.count(t, env, "status = 0"); n != 0 {
		t.Fatalf("%d rows still NEW", n)
	}
}

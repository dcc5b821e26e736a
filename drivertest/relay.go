package drivertest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outbox-go/outbox"
)

// testClaimPlan checks that the claims go through their indexes: a planner
// may skip a partial index (SQLite does when the query does not repeat its
// condition literally), and then every claim scans the whole table.
// PostgreSQL has no pending index (its SENT update is HOT): the rescan must
// walk the primary key and the requeued index, the claim from a cursor the
// primary key, and neither may scan the table.
func (s suite[TTx]) testClaimPlan(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("plan", 2000)...)
	drain(t, newRelay(t, env.Driver, &recorder{}, outbox.RelayConfig{BatchSize: 1000}))
	s.write(t, env, manyMsgs("plan-new", 50)...)
	ex := engine(t, env.Driver)
	plan, err := ex.ExplainClaim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if env.Driver.Dialect() != "postgres" {
		if !strings.Contains(plan, "outbox_pending_idx") {
			t.Fatalf("the claim does not use the pending index:\n%s", plan)
		}
		return
	}
	rescan, cursor, ok := strings.Cut(plan, "-- from a cursor\n")
	if !ok {
		t.Fatalf("no plan of the claim from a cursor:\n%s", plan)
	}
	for _, c := range []struct {
		name, plan string
		want       []string
	}{
		// The leases are looked up and recorded by their chunk.
		{"rescan", rescan, []string{"outbox_pkey", "outbox_requeued_idx", "outbox_claims_pkey"}},
		{"claim from a cursor", cursor, []string{"outbox_pkey", "outbox_claims_pkey"}},
	} {
		for _, w := range c.want {
			if !strings.Contains(c.plan, w) {
				t.Errorf("the %s does not use %s:\n%s", c.name, w, c.plan)
			}
		}
		for _, bad := range []string{"Seq Scan on outbox ", "Sort", "Bitmap"} {
			if strings.Contains(c.plan, bad) {
				t.Errorf("the %s plan has %q:\n%s", c.name, bad, c.plan)
			}
		}
	}
}

// runUntilNoneNew runs r.Run until no row is NEW (or within has passed, after
// which the caller's checks fail), cancels it, and fails the test unless Run
// then returns nil.
func (s suite[TTx]) runUntilNoneNew(t *testing.T, ctx context.Context, env *Env[TTx], r *outbox.Relay, within time.Duration) {
	t.Helper()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	deadline := time.Now().Add(within)
	for s.count(t, env, "status = 0") > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v on cancel", err)
	}
}

// testRelaySlowBroker runs Relay.Run against a broker slower than the
// claim, where Run claims the next batch while the broker has the previous
// one (as far as the store's outboxdriver.ClaimOverlap allows): the claim held ahead
// must never hold up the previous batch's mark, and every row goes out once.
func (s suite[TTx]) testRelaySlowBroker(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("slow", 125)...)
	rec := &recorder{}
	pub := outbox.BatchPublishFunc(func(ctx context.Context, msgs []outbox.Message) []error {
		time.Sleep(30 * time.Millisecond) // far slower than a claim of 10 rows
		return rec.Publish(ctx, msgs)
	})
	r := newRelay(t, env.Driver, pub, outbox.RelayConfig{BatchSize: 10})
	// One batch first, so that SENT rows sit in the table as they do in a
	// running system (with MySQL they change which index the marks use).
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	// 12 batches take 0.4 s of publishing; a mark stuck behind a lock would
	// take the database's lock timeout (50 s for InnoDB) to give up.
	s.runUntilNoneNew(t, ctx, env, r, 15*time.Second)
	if n := s.count(t, env, "status = 1"); n != 125 {
		t.Fatalf("SENT = %d after 15 s, want 125: a mark waited on the claim held ahead of it", n)
	}
	for id, c := range rec.seen {
		if c != 1 {
			t.Fatalf("%s published %d times", id, c)
		}
	}
}

func (s suite[TTx]) testRelay(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("r", 25)...)
	rec := &recorder{}
	r := newRelay(t, env.Driver, rec, outbox.RelayConfig{BatchSize: 10})
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent != 10 || len(rep.Results) != 10 || rep.Results[0].Message.MsgID != "r-00000" {
		t.Fatalf("first batch: sent %d of %d", rep.Sent, len(rep.Results))
	}
	if n := s.count(t, env, "status = 1 AND sent_at IS NOT NULL"); n != 10 {
		t.Fatalf("SENT rows with sent_at: %d, want 10", n)
	}
	m := rec.got[0]
	if m.ID == 0 || m.Topic != "test.topic" || m.CreatedAt.IsZero() || !jsonEqual(m.Payload, []byte(`{"id":"r-00000"}`)) {
		t.Fatalf("published message = %+v", m)
	}
	// Run loops at once on full batches and stops cleanly on cancel.
	s.runUntilNoneNew(t, ctx, env, r, 20*time.Second)
	if n := s.count(t, env, "status = 1"); n != 25 {
		t.Fatalf("SENT = %d, want 25", n)
	}
	for id, c := range rec.seen {
		if c != 1 {
			t.Fatalf("%s published %d times", id, c)
		}
	}
}

func (s suite[TTx]) testRelayFailures(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, msg("ok-1"), msg("poison"), msg("ok-2"))
	var attempts atomic.Int32
	pub := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		if m.MsgID == "poison" {
			attempts.Add(1)
			return errors.New("broker refused: message too large")
		}
		return nil
	})
	r := newRelay(t, env.Driver, pub, outbox.RelayConfig{MaxRetries: 3, RetryBase: 300 * time.Millisecond, RetryMax: 300 * time.Millisecond})
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent != 2 || rep.Retried != 1 {
		t.Fatalf("first batch: %+v", rep)
	}
	p, err := env.Driver.GetMessage(ctx, "poison")
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != outbox.StatusNew || p.Retries != 1 || !strings.Contains(p.LastError, "too large") {
		t.Fatalf("after one failure: status %v retries %d last_error %q", p.Status, p.Retries, p.LastError)
	}
	if d := p.NextRetryAt.Sub(p.CreatedAt); d < 100*time.Millisecond {
		t.Fatalf("next_retry_at only %s after created_at; backoff not applied", d)
	}
	// Not due yet: the next batch is empty.
	if rep, _ := r.RunOnce(ctx); len(rep.Results) != 0 {
		t.Fatalf("message retried before its next_retry_at: %+v", rep)
	}
	for i := 0; i < 2; i++ {
		time.Sleep(400 * time.Millisecond)
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	p, _ = env.Driver.GetMessage(ctx, "poison")
	if p.Status != outbox.StatusDead || p.Retries != 3 || attempts.Load() != 3 {
		t.Fatalf("after 3 failures: status %v retries %d attempts %d, want DEAD 3 3", p.Status, p.Retries, attempts.Load())
	}
	// dead_at: the third attempt, after two backoffs of 100ms or more.
	if p.DeadAt.Before(p.CreatedAt.Add(200 * time.Millisecond)) {
		t.Fatalf("dead_at %s, created_at %s: the DEAD row does not record when it became DEAD", p.DeadAt, p.CreatedAt)
	}
	time.Sleep(400 * time.Millisecond)
	if rep, _ := r.RunOnce(ctx); len(rep.Results) != 0 {
		t.Fatal("a DEAD message was claimed again")
	}
	if n := s.count(t, env, "status = 1"); n != 2 {
		t.Fatalf("poison message held back the others: SENT = %d", n)
	}
}

// testDueBehindBackoff: rows waiting out a long backoff, ahead of a row that
// is due, do not hide it from the claim, however many of them there are per
// batch (the claim must count only due rows towards its limit).
func (s suite[TTx]) testDueBehindBackoff(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	msgs := append(manyMsgs("wait", 40), msg("due"))
	s.write(t, env, msgs...)
	// First pass: every "wait" message is refused (retried in an hour), and
	// "due" meets an unreachable broker (released: due again at once).
	first := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		if m.MsgID == "due" {
			return outbox.Unavailable(errors.New("connection refused"))
		}
		return errors.New("refused")
	})
	r := newRelay(t, env.Driver, first, outbox.RelayConfig{RetryBase: time.Hour, RetryMax: time.Hour})
	if rep, err := r.RunOnce(ctx); err != nil || rep.Retried != 40 {
		t.Fatalf("first pass: %+v, %v; want 40 retried", rep, err)
	}
	// A relay with a batch of one: 40 rows not due lie before the due one.
	rec := &recorder{}
	r = newRelay(t, env.Driver, rec, outbox.RelayConfig{BatchSize: 1})
	for i := 0; i < 3 && len(rec.ids()) == 0; i++ {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := rec.ids(); len(got) != 1 || got[0] != "due" {
		t.Fatalf("claims with rows in backoff ahead of a due one published %v, want [due]", got)
	}
	if n := s.count(t, env, "status = 0 AND retries = 1"); n != 40 {
		t.Fatalf("rows still waiting out their backoff = %d, want 40", n)
	}
}

// testBackoffFromFailure: a failed message's backoff, and a DEAD message's
// dead_at, count from when the failure was recorded, not from when the batch
// was claimed: a slow broker must not eat the backoff while it answers.
func (s suite[TTx]) testBackoffFromFailure(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	const slow = 700 * time.Millisecond
	refuseSlowly := outbox.PublishFunc(func(context.Context, outbox.Message) error {
		time.Sleep(slow) // one message per batch here
		return errors.New("refused after a while")
	})
	s.write(t, env, msg("slow-retry"))
	// Equal jitter: the delay is 500 ms to 1 s, so next_retry_at is at least
	// created_at + 700 ms + 500 ms; counted from the claim it could be 1 s at most.
	r := newRelay(t, env.Driver, refuseSlowly, outbox.RelayConfig{RetryBase: time.Second, RetryMax: time.Second})
	if rep, err := r.RunOnce(ctx); err != nil || rep.Retried != 1 {
		t.Fatalf("RunOnce: %+v, %v; want 1 retried", rep, err)
	}
	m, err := env.Driver.GetMessage(ctx, "slow-retry")
	if err != nil {
		t.Fatal(err)
	}
	if d := m.NextRetryAt.Sub(m.CreatedAt); d < slow+500*time.Millisecond-50*time.Millisecond {
		t.Fatalf("next_retry_at is %s after created_at, want at least %s (the publish took %s, the backoff is 500ms or more)", d, slow+500*time.Millisecond, slow)
	}
	s.write(t, env, msg("slow-dead"))
	r = newRelay(t, env.Driver, refuseSlowly, outbox.RelayConfig{MaxRetries: 1})
	if rep, err := r.RunOnce(ctx); err != nil || rep.Dead != 1 {
		t.Fatalf("RunOnce: %+v, %v; want 1 dead", rep, err)
	}
	if m, err = env.Driver.GetMessage(ctx, "slow-dead"); err != nil {
		t.Fatal(err)
	}
	if d := m.DeadAt.Sub(m.CreatedAt); d < slow-50*time.Millisecond {
		t.Fatalf("dead_at is %s after created_at, want at least %s (the publish that failed took that long)", d, slow)
	}
}

// testErrorTextStored: whatever bytes a publisher's error holds (a NUL, bytes
// that are not UTF-8, a multi-byte character where the text is cut), the
// failure is recorded and the row takes its retry path; an unstorable text
// would fail the mark and publish the whole batch again and again.
func (s suite[TTx]) testErrorTextStored(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, msg("bad-bytes"), msg("fine"))
	long := strings.Repeat("a", 1999) + "é and more"
	texts := map[string]string{"bad-bytes": "broker said \x00\xff\xfe: " + long}
	refuse := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		if t, ok := texts[m.MsgID]; ok {
			return errors.New(t)
		}
		return nil
	})
	r := newRelay(t, env.Driver, refuse, outbox.RelayConfig{RetryBase: time.Hour, RetryMax: time.Hour})
	rep, err := r.RunOnce(ctx)
	if err != nil || rep.Sent != 1 || rep.Retried != 1 {
		t.Fatalf("RunOnce: %+v, %v; want 1 sent and 1 retried", rep, err)
	}
	m, err := env.Driver.GetMessage(ctx, "bad-bytes")
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != outbox.StatusNew || m.Retries != 1 {
		t.Fatalf("after the failure: status %v retries %d, want NEW 1", m.Status, m.Retries)
	}
	if !utf8.ValidString(m.LastError) || strings.ContainsRune(m.LastError, 0) || len(m.LastError) > 2000 ||
		!strings.HasPrefix(m.LastError, "broker said ") {
		t.Fatalf("last_error %q (%d bytes): want valid UTF-8 without NUL, at most 2000 bytes", m.LastError[:min(len(m.LastError), 40)], len(m.LastError))
	}
	if n := s.count(t, env, "status = 1"); n != 1 {
		t.Fatalf("SENT rows = %d, want 1: the batch's mark did not hold", n)
	}
}

func (s suite[TTx]) testRelayUnavailable(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("u", 5)...)
	var calls atomic.Int32
	down := outbox.BatchPublishFunc(func(_ context.Context, msgs []outbox.Message) []error {
		calls.Add(1)
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = outbox.Unavailable(errors.New("dial tcp 127.0.0.1:1: connection refused"))
		}
		return errs
	})
	r := newRelay(t, env.Driver, down, outbox.RelayConfig{MaxRetries: 1, PauseBase: 50 * time.Millisecond, PauseMax: 100 * time.Millisecond})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	time.Sleep(600 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c := calls.Load(); c < 2 || c > 20 {
		t.Fatalf("publisher called %d times in 600ms; want a paused, backing-off relay", c)
	}
	// MaxRetries is 1, yet nothing is DEAD and no retry was spent.
	if n := s.count(t, env, "status = 0 AND retries = 0"); n != 5 {
		t.Fatalf("NEW rows with no retries spent = %d, want 5", n)
	}
	// The broker comes back.
	rec := &recorder{}
	if n := drain(t, newRelay(t, env.Driver, rec, outbox.RelayConfig{})); n != 5 {
		t.Fatalf("after the broker returned: relayed %d", n)
	}
}

func (s suite[TTx]) testRelayStop(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("stop", 3)...)
	inPublish := make(chan struct{})
	release := make(chan struct{})
	pub := outbox.BatchPublishFunc(func(pctx context.Context, msgs []outbox.Message) []error {
		close(inPublish)
		<-release
		if pctx.Err() != nil {
			return []error{pctx.Err(), pctx.Err(), pctx.Err()}
		}
		return nil
	})
	r := newRelay(t, env.Driver, pub, outbox.RelayConfig{})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	<-inPublish
	cancel() // SIGTERM while the batch is at the broker
	time.Sleep(50 * time.Millisecond)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := s.count(t, env, "status = 1"); n != 3 {
		t.Fatalf("batch in flight at stop: %d SENT, want 3", n)
	}
}

package drivertest

import (
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// testAnyDue: the relay's idle probe (outboxdriver.DueChecker) answers no only
// when no committed row is NEW and due: not for a fresh row, not for a row
// that commits after later ids were relayed and swept past, not for a row
// requeued for a retry that has come due.
func (s suite[TTx]) testAnyDue(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	dc, ok := env.Driver.(outboxdriver.DueChecker)
	if !ok {
		t.Fatalf("%T does not implement outboxdriver.DueChecker", env.Driver)
	}
	due := func(want bool, what string) {
		t.Helper()
		got, err := dc.AnyDue(ctx)
		if err != nil {
			t.Fatalf("AnyDue %s: %v", what, err)
		}
		if got != want {
			t.Fatalf("AnyDue %s = %v, want %v", what, got, want)
		}
	}
	due(false, "on an empty table")
	s.write(t, env, msg("due-1"))
	due(true, "after a commit")
	r := newRelay(t, env.Driver, &recorder{}, outbox.RelayConfig{})
	drain(t, r)
	due(false, "once drained")

	if env.ConcurrentWriters {
		w, _ := outbox.NewWriter(env.Driver, outbox.WriterConfig{})
		slow, err := env.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(ctx, slow, msg("due-slow")); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			s.write(t, env, msg("due-fast-"+string(rune('a'+i))))
			drain(t, r)
			// Past the sweep's spacing, so that the probe sweeps too.
			time.Sleep(1100 * time.Millisecond)
			due(false, "beside an open transaction")
		}
		if err := env.Commit(ctx, slow); err != nil {
			t.Fatal(err)
		}
		due(true, "after a late commit")
		drain(t, r)
		due(false, "once the late commit is relayed")
	}

	// A retry that has come due, below every id written since.
	s.write(t, env, msg("due-retry"))
	c, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: time.Minute})
	if err != nil || len(c.Messages()) != 1 {
		t.Fatalf("claim: %v, %d messages", err, len(c.Messages()))
	}
	if err := c.Finish(ctx, []outbox.Outcome{{Kind: outbox.OutcomeRetry, Delay: time.Millisecond, Error: "x"}}); err != nil {
		t.Fatal(err)
	}
	s.write(t, env, msg("due-after-retry"))
	for range 3 {
		c, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 1, AfterID: 0, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		c.Abort(ctx)
	}
	time.Sleep(10 * time.Millisecond)
	due(true, "with a retry due")
	drain(t, r)
	due(false, "once the retry is relayed")
}

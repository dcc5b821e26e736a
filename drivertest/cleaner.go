package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

// sentAndPending fills the table for a cleanup: 30 SENT rows, then 2 NEW
// rows and a DEAD one.
func (s suite[TTx]) sentAndPending(t *testing.T, env *Env[TTx]) {
	t.Helper()
	s.write(t, env, manyMsgs("old", 30)...)
	drain(t, newRelay(t, env.Driver, &recorder{}, outbox.RelayConfig{}))
	s.write(t, env, manyMsgs("new", 3)...)
	if err := env.Exec(ctxT(t), "UPDATE outbox SET status = 2 WHERE msg_id = 'new-00000'"); err != nil {
		t.Fatal(err)
	}
}

// testCleaner runs outbox.Cleaner against the real store: its rounds stop
// at MaxBatches, delete only SENT rows past the age, and Run keeps going
// until its context ends.
func (s suite[TTx]) testCleaner(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.sentAndPending(t, env)
	c, err := outbox.NewCleaner(env.Driver, outbox.CleanerConfig{OlderThan: 300 * time.Millisecond, BatchSize: 7, MaxBatches: 2,
		Interval: 20 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := c.RunOnce(ctx); err != nil || rep != (outbox.CleanerReport{}) {
		t.Fatalf("a round over fresh rows: %+v, %v", rep, err)
	}
	time.Sleep(400 * time.Millisecond)
	if rep, err := c.RunOnce(ctx); err != nil || rep != (outbox.CleanerReport{Sent: 14}) {
		t.Fatalf("a round of 2 batches of 7: %+v, %v", rep, err)
	}
	// Run deletes the other 16 in rounds and leaves the NEW and DEAD rows.
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for s.count(t, env, "1 = 1") > 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := s.count(t, env, "1 = 1"); n != 3 {
		t.Fatalf("%d rows left, want the 3 NEW/DEAD ones", n)
	}
	if n := s.count(t, env, "status = 1"); n != 0 {
		t.Fatalf("%d SENT rows left", n)
	}
}

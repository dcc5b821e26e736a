package drivertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

// testInboxCleanup deletes old inbox records of every group, in batches, and
// keeps the recent ones; a message whose record is gone is applied again,
// which is what the cleanup's age must be chosen against.
func (s suite[TTx]) testInboxCleanup(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	ib := outbox.NewInbox(env.Driver)
	nop := func(context.Context, TTx) error { return nil }
	consume := func(group string, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if applied, err := ib.Process(ctx, group, id, nop); err != nil || !applied {
				t.Fatalf("%s/%s: applied=%v, %v", group, id, applied, err)
			}
		}
	}
	inbox := func() int64 {
		t.Helper()
		n, err := env.QueryInt(ctx, "SELECT count(*) FROM consumed_msg")
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	var old []string
	for i := range 9 {
		old = append(old, fmt.Sprintf("old-%d", i))
	}
	consume("billing", old...)
	consume("audit", old[:3]...)
	time.Sleep(400 * time.Millisecond)
	consume("billing", "new-1", "new-2")

	if n, err := env.Driver.DeleteConsumed(ctx, time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("nothing is an hour old: %d, %v", n, err)
	}
	total := int64(0)
	for {
		n, err := env.Driver.DeleteConsumed(ctx, 250*time.Millisecond, 5)
		if err != nil {
			t.Fatal(err)
		}
		if n > 5 {
			t.Fatalf("a batch of 5 deleted %d", n)
		}
		total += n
		if n < 5 {
			break
		}
	}
	if total != 12 || inbox() != 2 {
		t.Fatalf("deleted %d (want the 12 old records of both groups), %d left (want 2)", total, inbox())
	}
	// The recent records still deduplicate; a forgotten message is applied again.
	if applied, err := ib.Process(ctx, "billing", "new-1", nop); err != nil || applied {
		t.Fatalf("a recent duplicate: applied=%v, %v", applied, err)
	}
	if applied, err := ib.Process(ctx, "billing", "old-0", nop); err != nil || !applied {
		t.Fatalf("a message whose record was deleted: applied=%v, %v", applied, err)
	}
	if _, err := env.Driver.DeleteConsumed(ctx, -time.Second, 10); err == nil {
		t.Fatal("a negative age was taken")
	}
}

// testCleanupBesideWriters: a cleanup of either table does not wait for a
// business transaction that has written a message and an inbox record and
// not committed yet, and the writer is not held up by it. Where writers
// take turns (SQLite), the cleanup waits for the writer and then runs.
func (s suite[TTx]) testCleanupBesideWriters(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.oldSentAndConsumed(t, ctx, env)
	tx := s.openWriterTx(t, ctx, env)
	cleaned, errs := s.startCleanup(ctx, env)
	got := s.awaitCleanupBesideTx(t, ctx, env, tx, cleaned, errs)
	if got != [2]int64{20, 20} {
		t.Fatalf("deleted %d SENT rows and %d inbox records, want 20 and 20", got[0], got[1])
	}
	if n := s.count(t, env, "msg_id = 'open'"); n != 1 {
		t.Fatal("the open transaction's message is gone")
	}
}

// oldSentAndConsumed writes 20 SENT rows and 20 inbox records, and waits
// until they are a second old.
func (s suite[TTx]) oldSentAndConsumed(t *testing.T, ctx context.Context, env *Env[TTx]) {
	s.write(t, env, manyMsgs("old", 20)...)
	drain(t, newRelay(t, env.Driver, &recorder{}, outbox.RelayConfig{}))
	ib := outbox.NewInbox(env.Driver)
	for i := range 20 {
		if _, err := ib.Process(ctx, "g", fmt.Sprintf("old-%d", i), func(context.Context, TTx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// The old rows are a second old; the cleanup takes what is older than
	// 600 ms; the open transaction's rows are younger than that.
	time.Sleep(time.Second)
}

// openWriterTx begins a business transaction that writes a message and an
// inbox record, and leaves it open.
func (s suite[TTx]) openWriterTx(t *testing.T, ctx context.Context, env *Env[TTx]) TTx {
	w, err := outbox.NewWriter(env.Driver, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, tx, msg("open")); err != nil {
		t.Fatal(err)
	}
	if fresh, err := env.Driver.MarkConsumedTx(ctx, tx, "g", "open"); err != nil || !fresh {
		t.Fatalf("inbox record in the open transaction: %v, %v", fresh, err)
	}
	return tx
}

// startCleanup deletes the SENT rows and the inbox records older than
// 600 ms in the background; it sends the two counts on cleaned, or its
// error on errs.
func (s suite[TTx]) startCleanup(ctx context.Context, env *Env[TTx]) (<-chan [2]int64, <-chan error) {
	cleaned := make(chan [2]int64, 1)
	errs := make(chan error, 1)
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		sent, err := env.Driver.DeleteSent(cctx, 600*time.Millisecond, 1000)
		if err != nil {
			errs <- fmt.Errorf("DeleteSent: %w", err)
			return
		}
		consumed, err := env.Driver.DeleteConsumed(cctx, 600*time.Millisecond, 1000)
		if err != nil {
			errs <- fmt.Errorf("DeleteConsumed: %w", err)
			return
		}
		cleaned <- [2]int64{sent, consumed}
	}()
	return cleaned, errs
}

// awaitCleanupBesideTx returns the counts of the cleanup startCleanup ran
// beside the open transaction tx, which it commits: where writers run at
// once the cleanup must end first and tx go on after it; where they take
// turns tx commits first.
func (s suite[TTx]) awaitCleanupBesideTx(t *testing.T, ctx context.Context, env *Env[TTx], tx TTx, cleaned <-chan [2]int64, errs <-chan error) (got [2]int64) {
	if env.ConcurrentWriters {
		select {
		case got = <-cleaned:
		case err := <-errs:
			t.Fatalf("a cleanup beside an open writer: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("the cleanup waited for a business transaction that had not committed")
		}
		// The writer goes on and commits.
		if err := env.ExecTx(ctx, tx, "INSERT INTO consumed_msg (consumer_group, msg_id) VALUES (?, ?)", "g", "open-2"); err != nil {
			t.Fatalf("the writer after the cleanup: %v", err)
		}
		if err := env.Commit(ctx, tx); err != nil {
			t.Fatal(err)
		}
	} else {
		time.Sleep(200 * time.Millisecond)
		if err := env.Commit(ctx, tx); err != nil {
			t.Fatal(err)
		}
		select {
		case got = <-cleaned:
		case err := <-errs:
			t.Fatalf("a cleanup after the writer committed: %v", err)
		}
	}
	return got
}

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

package drivertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/outbox-go/outbox"
)

func (s suite[TTx]) testInbox(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	ib := outbox.NewInbox(env.Driver)
	if err := env.Exec(ctx, "CREATE TABLE points (name VARCHAR(32) PRIMARY KEY, n BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := env.Exec(ctx, "INSERT INTO points (name, n) VALUES ('bob', 0)"); err != nil {
		t.Fatal(err)
	}
	add := func(ctx context.Context, tx TTx) error {
		return env.ExecTx(ctx, tx, "UPDATE points SET n = n + 100 WHERE name = ?", "bob")
	}
	for i, want := range []bool{true, false, false} {
		applied, err := ib.Process(ctx, "points", "m-1", add)
		if err != nil || applied != want {
			t.Fatalf("delivery %d: applied=%v err=%v, want %v", i+1, applied, err, want)
		}
	}
	// Another consumer group applies it once too.
	if applied, err := ib.Process(ctx, "audit", "m-1", func(context.Context, TTx) error { return nil }); !applied || err != nil {
		t.Fatalf("second group: %v %v", applied, err)
	}
	// A failing handler records nothing; the redelivery applies it.
	boom := errors.New("handler failed")
	if applied, err := ib.Process(ctx, "points", "m-2", func(ctx context.Context, tx TTx) error {
		if err := add(ctx, tx); err != nil {
			return err
		}
		return boom
	}); applied || !errors.Is(err, boom) {
		t.Fatalf("failing handler: %v %v", applied, err)
	}
	if applied, err := ib.Process(ctx, "points", "m-2", add); !applied || err != nil {
		t.Fatalf("redelivery after failure: %v %v", applied, err)
	}
	if n, _ := env.QueryInt(ctx, "SELECT n FROM points WHERE name = 'bob'"); n != 200 {
		t.Fatalf("bob has %d points, want 200", n)
	}
	// MarkTx in the caller's own transaction.
	tx, _ := env.Begin(ctx)
	if fresh, err := ib.MarkTx(ctx, tx, "points", "m-1"); fresh || err != nil {
		t.Fatalf("MarkTx of a consumed message: %v %v", fresh, err)
	}
	if fresh, err := ib.MarkTx(ctx, tx, "points", "m-3"); !fresh || err != nil {
		t.Fatalf("MarkTx of a new message: %v %v", fresh, err)
	}
	if err := add(ctx, tx); err != nil {
		t.Fatalf("transaction unusable after a duplicate MarkTx: %v", err)
	}
	if err := env.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ group, id string }{{"", "m"}, {strings.Repeat("g", 65), "m"}, {"g", ""}, {"g", strings.Repeat("m", 65)}} {
		if _, err := ib.Process(ctx, c.group, c.id, add); !errors.Is(err, outbox.ErrInvalidMessage) {
			t.Errorf("Process(%q, %q): %v, want ErrInvalidMessage", c.group, c.id, err)
		}
	}
}

func (s suite[TTx]) testInboxConcurrent(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	ib := outbox.NewInbox(env.Driver)
	var runs atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				_, err := ib.Process(ctx, "g", fmt.Sprintf("c-%d", j), func(context.Context, TTx) error {
					runs.Add(1)
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if runs.Load() != 20 {
		t.Fatalf("handler ran %d times for 20 messages delivered 8 times each", runs.Load())
	}
}

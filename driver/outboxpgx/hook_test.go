package outboxpgx_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox"
)

type traceKey struct{}

// traceHook is an outbox.WriteHook that copies ctx's traceKey value into
// each message's "trace" header, or fails with err.
type traceHook struct {
	calls int
	err   error
}

func (h *traceHook) OnWrite(ctx context.Context, msgs []outbox.Message) error {
	h.calls++
	if h.err != nil {
		return h.err
	}
	for i := range msgs {
		msgs[i].Headers["trace"], _ = ctx.Value(traceKey{}).(string)
	}
	return nil
}

// Every write path of the pgx driver runs the Writer's write hooks with the
// caller's context: what a hook adds is stored, and a hook's error aborts
// the write before any statement, with the transaction untouched.
func TestWriteHooks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, d, _, balance := accountFixture(ctx, t, 0)
	hook := &traceHook{}
	w, err := outbox.NewWriter(d, outbox.WriterConfig{Hooks: []outbox.Hook{hook}})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("hook refused")
	// inTx debits 10 in a transaction, writes by write, debits 1 more
	// (which fails if write left the transaction aborted) and commits, also
	// after a hook's error, which it returns.
	inTx := func(ctx context.Context, write func(ctx context.Context, tx pgx.Tx) error) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = 1"); err != nil {
			return err
		}
		werr := write(ctx, tx)
		if werr != nil && !errors.Is(werr, boom) {
			return werr
		}
		if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 1 WHERE id = 1"); err != nil {
			t.Errorf("the transaction after the write: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		return werr
	}
	paths := []struct {
		name        string
		write       func(ctx context.Context, id string) error
		debitOnFail int // what a write the hook refused leaves debited
	}{
		{"Write", func(ctx context.Context, id string) error {
			return inTx(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, accountMsg(id)) })
		}, 11},
		{"QueueWrite", func(ctx context.Context, id string) error {
			return inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				var b pgx.Batch
				b.Queue("SELECT 1")
				if err := d.QueueWrite(ctx, w, &b, accountMsg(id)); err != nil {
					if b.Len() != 1 {
						t.Errorf("QueueWrite failed with %d statements in the batch, want the caller's 1", b.Len())
					}
					return err
				}
				return tx.SendBatch(ctx, &b).Close()
			})
		}, 11},
		{"WriteOnCommit", func(ctx context.Context, id string) error {
			return d.WriteOnCommit(ctx, w, func(ctx context.Context, tx pgx.Tx) ([]outbox.Message, error) {
				_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 11 WHERE id = 1")
				return []outbox.Message{accountMsg(id)}, err
			})
		}, 0},
	}
	want := 100
	for _, p := range paths {
		hook.err = nil
		calls := hook.calls
		id := "hooked-" + p.name
		if err := p.write(context.WithValue(ctx, traceKey{}, "via-"+p.name), id); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		want -= 11
		got, err := d.GetMessage(ctx, id)
		if err != nil || got.Headers["trace"] != "via-"+p.name || got.Headers["tenant"] != "acme" || hook.calls != calls+1 {
			t.Errorf("%s: stored %v (%v) after %d hook calls; want trace=via-%s beside tenant=acme, one call", p.name, got.Headers, err, hook.calls-calls, p.name)
		}

		hook.err = boom
		id = "refused-" + p.name
		err = p.write(ctx, id)
		if !errors.Is(err, boom) {
			t.Errorf("%s: the hook's error came back as %v", p.name, err)
		}
		want -= p.debitOnFail
		if _, err := d.GetMessage(ctx, id); !errors.Is(err, outbox.ErrNotFound) {
			t.Errorf("%s: a write the hook refused stored its message: %v", p.name, err)
		}
		if b := balance(); b != want {
			t.Errorf("%s: balance %d after the refused write, want %d", p.name, b, want)
		}
	}
}

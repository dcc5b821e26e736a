package outboxpgx_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox"
)

// WriteOnCommit commits the business change and its messages together, or
// neither: a duplicate msg_id, an error from fn, a refused message and an
// aborted transaction each leave the account and the outbox as they were,
// and the pool's connections stay usable.
func TestWriteOnCommit(t *testing.T) {
	t.Parallel()
	// Two connections, and a deadline: a connection that did not go back to
	// the pool would make a later Acquire wait until then.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, d, w, balance := accountFixture(ctx, t, 2)
	msg := accountMsg
	// debit takes 10 from the account and returns msgs (or fails with
	// fnErr) through WriteOnCommit.
	debit := func(fnErr error, msgs ...outbox.Message) error {
		return d.WriteOnCommit(ctx, w, func(ctx context.Context, tx pgx.Tx) ([]outbox.Message, error) {
			if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = 1"); err != nil {
				return nil, err
			}
			return msgs, fnErr
		})
	}
	rows := func() (n int) {
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	check := func(what string, wantBalance, wantRows int) {
		t.Helper()
		if b, r := balance(), rows(); b != wantBalance || r != wantRows {
			t.Fatalf("%s: balance %d, %d outbox rows; want %d and %d", what, b, r, wantBalance, wantRows)
		}
	}

	if err := debit(nil, msg("m1")); err != nil {
		t.Fatal(err)
	}
	got, err := d.GetMessage(ctx, "m1")
	if err != nil || got.Topic != "account.debited" || got.Key != "1" || got.Headers["tenant"] != "acme" || got.Status != outbox.StatusNew {
		t.Fatalf("m1 after the commit: %+v, %v", got, err)
	}
	check("one message", 90, 1)

	if err := debit(nil, msg("m2"), msg("m3"), msg("m4")); err != nil {
		t.Fatal(err)
	}
	check("three messages", 80, 4)

	if err := debit(nil); err != nil {
		t.Fatal(err)
	}
	check("no message", 70, 4)

	// A duplicate among several: nothing of the transaction commits.
	err = debit(nil, msg("m5"), msg("m2"), msg("m6"))
	var dup *outbox.DuplicateError
	if !errors.As(err, &dup) || !errors.Is(err, outbox.ErrDuplicate) || len(dup.MsgIDs) != 1 || dup.MsgIDs[0] != "m2" {
		t.Fatalf("a duplicate msg_id: %v", err)
	}
	check("after the duplicate", 70, 4)

	// fn's own error, and a message the writer refuses: rolled back before
	// anything is written.
	boom := errors.New("insufficient funds")
	if err := debit(boom, msg("m7")); !errors.Is(err, boom) {
		t.Fatalf("fn's error: %v", err)
	}
	bad := msg("m8")
	bad.Payload = json.RawMessage(`{not json`)
	if err := debit(nil, msg("m9"), bad); !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Fatalf("an invalid payload: %v", err)
	}
	check("after fn's error and a refused message", 70, 4)

	// fn hides a failed statement: the transaction is aborted. Without a
	// message the COMMIT answers ROLLBACK; with one, the insert fails.
	aborted := func(msgs ...outbox.Message) error {
		return d.WriteOnCommit(ctx, w, func(ctx context.Context, tx pgx.Tx) ([]outbox.Message, error) {
			if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = 1"); err != nil {
				return nil, err
			}
			_, _ = tx.Exec(ctx, "SELECT 1/0")
			return msgs, nil
		})
	}
	if err := aborted(); !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("an aborted transaction without messages: %v", err)
	}
	if err := aborted(msg("m10")); err == nil || errors.Is(err, outbox.ErrDuplicate) {
		t.Fatalf("an aborted transaction with a message: %v", err)
	}
	check("after the aborted transactions", 70, 4)

	// Savepoints inside fn work; a rolled-back savepoint keeps its change out.
	err = d.WriteOnCommit(ctx, w, func(ctx context.Context, tx pgx.Tx) ([]outbox.Message, error) {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := sp.Exec(ctx, "UPDATE accounts SET balance = 0 WHERE id = 1"); err != nil {
			return nil, err
		}
		if err := sp.Rollback(ctx); err != nil {
			return nil, err
		}
		_, err = tx.Exec(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = 1")
		return []outbox.Message{msg("m11")}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	check("with a savepoint", 60, 5)

	// The server ends the session before the batch with the COMMIT arrives:
	// an error, and nothing committed (the client cannot tell, and says so
	// when the batch had left).
	err = d.WriteOnCommit(ctx, w, func(ctx context.Context, tx pgx.Tx) ([]outbox.Message, error) {
		if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = 1"); err != nil {
			return nil, err
		}
		var pid int
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return nil, err
		}
		// Wait (up to 10 s) until the session is gone, so that the batch
		// cannot reach it first.
		var ended bool
		err := pool.QueryRow(ctx, "SELECT pg_terminate_backend($1, 10000)", pid).Scan(&ended)
		if err == nil && !ended {
			err = errors.New("the session did not end within 10 s")
		}
		return []outbox.Message{msg("m12")}, err
	})
	if err == nil || errors.Is(err, outbox.ErrDuplicate) {
		t.Fatalf("a session ended before the commit: %v", err)
	}
	t.Log(err)
	check("after the session ended", 60, 5)

	// ctx ends inside fn: the batch is never sent, and the error does not
	// pretend the outcome is unknown.
	cctx, ccancel := context.WithCancel(ctx)
	err = d.WriteOnCommit(cctx, w, func(ctx context.Context, tx pgx.Tx) ([]outbox.Message, error) {
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = 1")
		ccancel()
		return []outbox.Message{msg("m13")}, err
	})
	if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "not known") {
		t.Fatalf("ctx ended before the batch: %v", err)
	}
	check("after ctx ended", 60, 5)

	// Every connection went back to the pool outside a transaction: many
	// more transactions than the pool has connections still run.
	for i := range 3 * int(pool.Config().MaxConns) {
		if err := debit(nil, msg(fmt.Sprintf("n%d", i))); err != nil {
			t.Fatalf("transaction %d after the failures: %v", i, err)
		}
		_ = debit(nil, msg("m1")) // a duplicate each time
	}
	check("after the loop", 60-30*int(pool.Config().MaxConns), 5+3*int(pool.Config().MaxConns))

	if err := d.WriteOnCommit(ctx, nil, nil); err == nil {
		t.Fatal("a nil writer: no error")
	}
}

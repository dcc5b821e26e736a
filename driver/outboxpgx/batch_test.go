package outboxpgx_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxpgx"
)

// QueueWrite puts the outbox insert in the caller's own batch: it commits or
// rolls back with the business statements sent beside it, a duplicate
// msg_id is an ErrDuplicate that leaves the transaction usable, and a bad
// message is refused before anything is queued.
func TestQueueWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, d, w, balance := accountFixture(ctx, t, 0)
	// sendBatch debits the account and writes m in one batch, then runs
	// after (if any) in the same transaction and commits or rolls back.
	sendBatch := func(m outbox.Message, commit bool) (batchErr error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var b pgx.Batch
		b.Queue("UPDATE accounts SET balance = balance - 10 WHERE id = 1")
		if err := d.QueueWrite(ctx, w, &b, m); err != nil {
			return err
		}
		if batchErr = tx.SendBatch(ctx, &b).Close(); batchErr != nil {
			return batchErr
		}
		if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 1 WHERE id = 1"); err != nil {
			t.Fatalf("the transaction after the batch: %v", err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return batchErr
	}
	count := func(id string) (n int) {
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE msg_id = $1 AND status = 0", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if err := sendBatch(accountMsg("m1"), true); err != nil {
		t.Fatal(err)
	}
	got, err := d.GetMessage(ctx, "m1")
	if err != nil || got.Topic != "account.debited" || got.Headers["tenant"] != "acme" || balance() != 89 {
		t.Fatalf("after the batch: %+v, %v, balance %d", got, err, balance())
	}

	// Rolled back: neither the debit nor the message.
	if err := sendBatch(accountMsg("m2"), false); err != nil {
		t.Fatal(err)
	}
	if count("m2") != 0 || balance() != 89 {
		t.Fatalf("a rolled-back batch left m2 (%d) or changed the balance (%d)", count("m2"), balance())
	}

	// A duplicate: ErrDuplicate from the batch's Close, and the business
	// change queued beside it does not commit.
	err = sendBatch(accountMsg("m1"), true)
	var dup *outbox.DuplicateError
	if !errors.As(err, &dup) || !errors.Is(err, outbox.ErrDuplicate) || len(dup.MsgIDs) != 1 || dup.MsgIDs[0] != "m1" {
		t.Fatalf("a duplicate msg_id in a batch: %v", err)
	}
	if count("m1") != 1 || balance() != 89 {
		t.Fatalf("after the duplicate: %d rows of m1, balance %d; want 1 and 89", count("m1"), balance())
	}

	// The same, with the results read one by one (BatchResults.Exec, which
	// skips the queued insert's own check): the duplicate still fails the
	// insert and the transaction, so the debit cannot commit without its
	// message. It was lost without a word when the insert skipped
	// duplicates and told only its row count.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var b pgx.Batch
	b.Queue("UPDATE accounts SET balance = balance - 10 WHERE id = 1 AND balance >= 10")
	if err := d.QueueWrite(ctx, w, &b, accountMsg("m1")); err != nil {
		t.Fatal(err)
	}
	br := tx.SendBatch(ctx, &b)
	if ct, err := br.Exec(); err != nil || ct.RowsAffected() != 1 {
		t.Fatalf("the debit: %v, %v", ct, err)
	}
	if _, err := br.Exec(); !outboxpgx.IsUniqueViolation(err) {
		t.Fatalf("the duplicate's insert, read with Exec: %v, want a unique violation", err)
	}
	_ = br.Close()
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("a transaction whose message was a duplicate committed")
	}
	if count("m1") != 1 || balance() != 89 {
		t.Fatalf("after the duplicate read with Exec: %d rows of m1, balance %d; want 1 and 89", count("m1"), balance())
	}

	// Refused before anything is queued.
	b = pgx.Batch{}
	bad := accountMsg("m3")
	bad.Topic = ""
	if err := d.QueueWrite(ctx, w, &b, bad); !errors.Is(err, outbox.ErrInvalidMessage) || b.Len() != 0 {
		t.Fatalf("an invalid message: %v, %d statements queued", err, b.Len())
	}
}

// accountFixture migrates a schema of its own with one account (id 1,
// balance 100), and returns its pool and driver, a Writer, and a reader of
// the account's balance.
func accountFixture(ctx context.Context, t *testing.T, maxConns int32) (*pgxpool.Pool, *outboxpgx.Driver, *outbox.Writer[pgx.Tx], func() int) {
	t.Helper()
	pool, d := migratedPool(ctx, t, newSchema(t), maxConns)
	if _, err := pool.Exec(ctx, "CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL); INSERT INTO accounts VALUES (1, 100)"); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(d, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	balance := func() (n int) {
		if err := pool.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = 1").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	return pool, d, w, balance
}

// accountMsg is an event of account 1.
func accountMsg(id string) outbox.Message {
	return outbox.Message{MsgID: id, Topic: "account.debited", Key: "1", Payload: json.RawMessage(`{"account":1}`), Headers: map[string]string{"tenant": "acme"}}
}

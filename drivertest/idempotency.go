package drivertest

import (
	"context"
	"errors"
	"testing"

	"github.com/outbox-go/outbox"
)

// testUniqueKey: the business-key strategy. The first insert of a key is
// applied; the second is a unique violation that outbox.UniqueKey reads as
// "already done"; any other error stays an error.
func (s suite[TTx]) testUniqueKey(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	if env.IsUniqueViolation == nil {
		t.Fatal("Env.IsUniqueViolation is not set: every driver must give its unique-violation predicate")
	}
	ctx := context.Background()
	if err := env.Exec(ctx, `CREATE TABLE payments (payment_id VARCHAR(64) PRIMARY KEY, amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	insert := func(tx TTx, id string) error {
		return env.ExecTx(ctx, tx, `INSERT INTO payments (payment_id, amount) VALUES (?, 100)`, id)
	}

	tx, err := env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if applied, err := outbox.UniqueKey(insert(tx, "pay-1"), env.IsUniqueViolation); !applied || err != nil {
		t.Fatalf("first insert: applied=%v err=%v, want true, nil", applied, err)
	}
	if err := env.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}

	tx, err = env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dupErr := insert(tx, "pay-1")
	if !env.IsUniqueViolation(dupErr) {
		t.Fatalf("IsUniqueViolation(%v) = false for a duplicate primary key", dupErr)
	}
	if applied, err := outbox.UniqueKey(dupErr, env.IsUniqueViolation); applied || err != nil {
		t.Fatalf("duplicate insert: applied=%v err=%v, want false, nil (already done)", applied, err)
	}
	_ = env.Rollback(ctx, tx)

	other := env.Exec(ctx, `INSERT INTO no_such_table (x) VALUES (1)`)
	if env.IsUniqueViolation(other) {
		t.Fatalf("IsUniqueViolation(%v) = true for a missing table", other)
	}
	if _, err := outbox.UniqueKey(other, env.IsUniqueViolation); err == nil {
		t.Fatal("UniqueKey swallowed an error that is not a unique violation")
	}
	if n, err := env.QueryInt(ctx, `SELECT count(*) FROM payments`); err != nil || n != 1 {
		t.Fatalf("payments = %d, %v; want 1", n, err)
	}
}

// testInboxHandler: Inbox.Handler, the form subscribers take, applies a
// message once per group, returns the function's error for a redelivery, and
// marks a msg_id the inbox cannot record as permanent.
func (s suite[TTx]) testInboxHandler(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := context.Background()
	if err := env.Exec(ctx, `CREATE TABLE credits (msg_id VARCHAR(64) NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	fail := true
	h := outbox.NewInbox(env.Driver).Handler("billing", func(ctx context.Context, tx TTx, m outbox.Message) error {
		if err := env.ExecTx(ctx, tx, `INSERT INTO credits (msg_id, amount) VALUES (?, 100)`, m.MsgID); err != nil {
			return err
		}
		if fail {
			fail = false
			return errors.New("downstream hiccup")
		}
		return nil
	})
	m := outbox.Message{MsgID: "m-1", Topic: "credit", Payload: []byte(`{}`)}
	if err := h(ctx, m); err == nil || outbox.IsPermanent(err) {
		t.Fatalf("first delivery: %v, want the function's (transient) error", err)
	}
	for i := range 3 {
		if err := h(ctx, m); err != nil {
			t.Fatalf("delivery %d: %v", i+2, err)
		}
	}
	if n, err := env.QueryInt(ctx, `SELECT count(*) FROM credits`); err != nil || n != 1 {
		t.Fatalf("credits = %d, %v; want 1 (the failed attempt rolled back, the copies skipped)", n, err)
	}
	if err := h(ctx, outbox.Message{MsgID: ""}); !outbox.IsPermanent(err) {
		t.Fatalf("empty msg_id: %v, want a permanent error", err)
	}
}

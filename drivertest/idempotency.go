package drivertest

import (
	"context"
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

package drivertest

import (
	"context"
	"database/sql"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// SQLEnv builds an Env for a database/sql driver. rewrite turns '?'
// placeholders into the dialect's own (nil for none).
func SQLEnv(d outboxdriver.Driver[*sql.Tx], db *sql.DB, rewrite func(string) string,
	withTables func(outbox.Tables) (outboxdriver.Driver[*sql.Tx], error), concurrentWriters bool) *Env[*sql.Tx] {
	if rewrite == nil {
		rewrite = func(q string) string { return q }
	}
	return &Env[*sql.Tx]{
		Driver:     d,
		WithTables: withTables,
		Exec: func(ctx context.Context, q string, args ...any) error {
			_, err := db.ExecContext(ctx, rewrite(q), args...)
			return err
		},
		QueryInt: func(ctx context.Context, q string, args ...any) (int64, error) {
			var n int64
			err := db.QueryRowContext(ctx, rewrite(q), args...).Scan(&n)
			return n, err
		},
		Begin:    func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
		Commit:   func(_ context.Context, tx *sql.Tx) error { return tx.Commit() },
		Rollback: func(_ context.Context, tx *sql.Tx) error { return tx.Rollback() },
		ExecTx: func(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
			_, err := tx.ExecContext(ctx, rewrite(q), args...)
			return err
		},
		ConcurrentWriters: concurrentWriters,
	}
}

package datalayers

import (
	"context"
	"database/sql"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/examples/datalayers/sqlc/ordersmysql"
	"github.com/outbox-go/outbox/examples/datalayers/sqlc/orderspg"
)

// PlaceOrderSQLC inserts o through the queries sqlc generated for
// PostgreSQL (sqlc/orderspg), and its message, in one transaction: sqlc's
// Queries.WithTx takes the *sql.Tx that the writer takes too.
func PlaceOrderSQLC(ctx context.Context, db *sql.DB, q *orderspg.Queries, w *outbox.Writer[*sql.Tx], o Order) error {
	return inTx(ctx, db, w, o, func(tx *sql.Tx) error {
		return q.WithTx(tx).InsertOrder(ctx, orderspg.InsertOrderParams{ID: o.ID, Amount: o.Amount})
	})
}

// PlaceOrderSQLCMySQL is PlaceOrderSQLC with the queries sqlc generated for
// MySQL and MariaDB (sqlc/ordersmysql).
func PlaceOrderSQLCMySQL(ctx context.Context, db *sql.DB, q *ordersmysql.Queries, w *outbox.Writer[*sql.Tx], o Order) error {
	return inTx(ctx, db, w, o, func(tx *sql.Tx) error {
		return q.WithTx(tx).InsertOrder(ctx, ordersmysql.InsertOrderParams{ID: o.ID, Amount: o.Amount})
	})
}

// inTx runs insert and writes o's message in one transaction of db.
func inTx(ctx context.Context, db *sql.DB, w *outbox.Writer[*sql.Tx], o Order, insert func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := insert(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := w.Write(ctx, tx, orderPlaced(o)); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

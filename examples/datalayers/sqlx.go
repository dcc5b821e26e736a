package datalayers

import (
	"context"
	"database/sql"

	"github.com/jmoiron/sqlx"
	"github.com/outbox-go/outbox"
)

// PlaceOrderSQLX inserts o and its message in one sqlx transaction. insert is
// the dialect's INSERT of an order, with sqlx named parameters.
func PlaceOrderSQLX(ctx context.Context, db *sqlx.DB, w *outbox.Writer[*sql.Tx], insert string, o Order) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.NamedExecContext(ctx, insert, o); err != nil {
		_ = tx.Rollback()
		return err
	}
	// *sqlx.Tx embeds the *sql.Tx that the writer takes.
	if err := w.Write(ctx, tx.Tx, orderPlaced(o)); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

package datalayers

import (
	"context"
	"database/sql"

	"github.com/outbox-go/outbox"
	"github.com/uptrace/bun"
)

// PlaceOrderBun inserts o and its message in one bun transaction.
func PlaceOrderBun(ctx context.Context, db *bun.DB, w *outbox.Writer[*sql.Tx], o Order) error {
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&o).ModelTableExpr("orders").Exec(ctx); err != nil {
			return err
		}
		// bun.Tx carries the *sql.Tx that the writer takes.
		return w.Write(ctx, tx.Tx, orderPlaced(o))
	})
}

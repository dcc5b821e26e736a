package datalayers

import (
	"context"
	"database/sql"

	entsql "entgo.io/ent/dialect/sql"
	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/examples/datalayers/ent"
)

// PlaceOrderEnt inserts o and its message in one transaction through ent.
// An ent transaction (client.Tx) does not hand out its *sql.Tx, so the
// transaction is begun on the *sql.DB and an ent client is bound to it:
// entsql.Conn runs ent's statements on the *sql.Tx that the writer takes.
// dialect is ent's name of the database: dialect.Postgres or dialect.MySQL.
func PlaceOrderEnt(ctx context.Context, db *sql.DB, dialect string, w *outbox.Writer[*sql.Tx], o Order) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	client := ent.NewClient(ent.Driver(entsql.NewDriver(dialect, entsql.Conn{ExecQuerier: tx})))
	if _, err := client.Order.Create().SetID(o.ID).SetAmount(o.Amount).Save(ctx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := w.Write(ctx, tx, orderPlaced(o)); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

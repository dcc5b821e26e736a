// Package datalayers shows how to write an outbox message inside the
// transaction of a Go data layer: sqlx, GORM, bun, sqlc and ent. The first
// four hold a *sql.Tx that the outbox Writer takes as it is:
//
//   - sqlx: *sqlx.Tx embeds *sql.Tx (tx.Tx);
//   - GORM: inside db.Transaction, tx.Statement.ConnPool is the *sql.Tx;
//   - bun: bun.Tx carries its *sql.Tx (tx.Tx);
//   - sqlc: the generated Queries.WithTx takes the *sql.Tx.
//
// ent's transaction does not hand out its *sql.Tx, so PlaceOrderEnt begins
// the *sql.Tx itself and binds an ent client to it (entsql.Conn).
//
// The writer is outbox.NewWriter over a database/sql driver: outboxpgx.NewStdlib
// for PostgreSQL through pgx's stdlib, or outboxmysql.New for MariaDB/MySQL.
// Each function inserts an order and its OrderPlaced message in one
// transaction: both commit or neither does.
package datalayers

import (
	"encoding/json"
	"fmt"

	"github.com/outbox-go/outbox"
)

// Order is the business row that the examples insert.
type Order struct {
	ID     int64 `db:"id" gorm:"primaryKey;autoIncrement:false" bun:"id,pk"`
	Amount int64 `db:"amount" bun:"amount"`
}

// orderPlaced is the message written beside an order.
func orderPlaced(o Order) outbox.Message {
	payload, _ := json.Marshal(o) // an Order always marshals
	return outbox.Message{
		MsgID:   fmt.Sprintf("order-%d:OrderPlaced", o.ID),
		Topic:   "order.placed",
		Key:     fmt.Sprintf("order-%d", o.ID),
		Payload: payload,
	}
}

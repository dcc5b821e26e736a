package outboxsqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
)

// Two idempotency strategies that use what the effect already has: a
// business unique key, and a compare-and-set on the order's state. The same
// message handled twice changes nothing the second time.
func Example_idempotency() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := outboxsqlite.Open(filepath.Join(dir, "billing.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `
		CREATE TABLE payments (payment_id TEXT PRIMARY KEY, amount INTEGER NOT NULL);
		CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL);
		INSERT INTO orders (id, status) VALUES (42, 'new')`); err != nil {
		panic(err)
	}

	// Business unique key: the payment id comes from the message.
	recordPayment := func(m outbox.Message) (bool, error) {
		_, err := db.ExecContext(ctx, `INSERT INTO payments (payment_id, amount) VALUES (?, 100)`, m.MsgID)
		return outbox.UniqueKey(err, outboxsqlite.IsUniqueViolation)
	}
	// State machine: only a 'new' order can become 'paid'.
	markPaid := func(m outbox.Message) (bool, error) {
		res, err := db.ExecContext(ctx, `UPDATE orders SET status = 'paid' WHERE id = 42 AND status = 'new'`)
		if err != nil {
			return false, err
		}
		return outbox.CompareAndSet(rowsAffected(res))
	}

	m := outbox.Message{MsgID: "order-42:OrderPaid", Topic: "order.paid"}
	for delivery := 1; delivery <= 2; delivery++ {
		paid, err := recordPayment(m)
		if err != nil {
			panic(err)
		}
		moved, err := markPaid(m)
		if err != nil {
			panic(err)
		}
		fmt.Printf("delivery %d: payment recorded=%v, order moved=%v\n", delivery, paid, moved)
	}
	// Output:
	// delivery 1: payment recorded=true, order moved=true
	// delivery 2: payment recorded=false, order moved=false
}

func rowsAffected(res sql.Result) (int64, error) { return res.RowsAffected() }

package outboxmysql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" database/sql driver

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
)

// Writing a message in a *sql.Tx on MariaDB or MySQL and relaying it.
func Example() {
	ctx := context.Background()
	// parseTime and loc=UTC: the outbox reads UTC DATETIMEs as time.Time;
	// interpolateParams saves round trips.
	const params = "?parseTime=true&loc=UTC&interpolateParams=true"

	// A database of its own, so that the example never meets other tables.
	name := fmt.Sprintf("outbox_example_%08x", rand.Uint32())
	admin, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/test"+params)
	if err != nil {
		panic(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		panic(err)
	}
	defer admin.ExecContext(ctx, "DROP DATABASE "+name)

	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/"+name+params)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	drv, err := outboxmysql.New(db, outbox.Tables{})
	if err != nil {
		panic(err)
	}
	if err := drv.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL)"); err != nil {
		panic(err)
	}

	// The order and the event that announces it commit together.
	w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
	if err != nil {
		panic(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, status) VALUES (?, 'placed')", 42); err != nil {
		tx.Rollback()
		panic(err)
	}
	err = w.Write(ctx, tx, outbox.Message{
		MsgID:   "order-42:OrderPlaced",
		Topic:   "order.placed",
		Key:     "order-42",
		Payload: json.RawMessage(`{"order":42}`),
		Headers: map[string]string{"tenant": "acme"},
	})
	if err != nil {
		tx.Rollback()
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	// A PublishFunc stands in for a broker adapter here; returning nil
	// acknowledges the message.
	pub := outbox.PublishFunc(func(ctx context.Context, m outbox.Message) error {
		fmt.Println("publish:", m.Topic, m.MsgID, "key", m.Key, "tenant", m.Headers["tenant"])
		return nil
	})
	relay, err := outbox.NewRelay(drv, pub, outbox.RelayConfig{})
	if err != nil {
		panic(err)
	}
	rep, err := relay.RunOnce(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("relay sent:", rep.Sent)

	st, err := drv.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("pending=%d sent=%d dead=%d\n", st.Pending, st.Sent, st.Dead)

	// Output:
	// publish: order.placed order-42:OrderPlaced key order-42 tenant acme
	// relay sent: 1
	// pending=0 sent=1 dead=0
}

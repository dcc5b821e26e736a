package outboxpgx_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/outboxdriver"
)

// Writing a message in a pgx transaction, relaying it, and reading the counts.
func Example() {
	ctx := context.Background()
	dsn, drop := exampleSchema(ctx) // a schema of its own: the example never meets other tables
	defer drop()

	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	drv, err := outboxpgx.New(pool, outbox.Tables{})
	if err != nil {
		panic(err)
	}
	if err := drv.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE orders (id BIGINT PRIMARY KEY, status TEXT NOT NULL)"); err != nil {
		panic(err)
	}

	// The order and the event that announces it commit together.
	w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
	if err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders (id, status) VALUES ($1, 'placed')", 42); err != nil {
			return err
		}
		return w.Write(ctx, tx, outbox.Message{
			MsgID:   "order-42:OrderPlaced",
			Topic:   "order.placed",
			Key:     "order-42",
			Payload: json.RawMessage(`{"order":42}`),
		})
	})
	if err != nil {
		panic(err)
	}
	printStats(ctx, drv)

	// outbox.Discard acknowledges everything; a real program passes a broker
	// adapter and calls relay.Run(ctx) instead.
	relay, err := outbox.NewRelay(drv, outbox.Discard, outbox.RelayConfig{})
	if err != nil {
		panic(err)
	}
	rep, err := relay.RunOnce(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("relay sent:", rep.Sent)
	printStats(ctx, drv)

	// Output:
	// pending=1 sent=0 dead=0
	// relay sent: 1
	// pending=0 sent=1 dead=0
}

// exampleSchema makes a schema of its own for an example and returns a DSN
// whose search_path is that schema, and the function that drops it.
func exampleSchema(ctx context.Context) (dsn string, drop func()) {
	const server = "postgres://postgres@127.0.0.1:5432/test"
	schema := fmt.Sprintf("outbox_example_%08x", rand.Uint32())
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		panic(err)
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		panic(err)
	}
	return server + "?search_path=" + schema, func() {
		admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		admin.Close(ctx)
	}
}

func printStats(ctx context.Context, store outboxdriver.Store) {
	st, err := store.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("pending=%d sent=%d dead=%d\n", st.Pending, st.Sent, st.Dead)
}

// The same driver on database/sql: open with pgx's stdlib driver ("pgx"), and
// the Writer and Inbox take a *sql.Tx.
func ExampleNewStdlib() {
	ctx := context.Background()
	dsn, drop := exampleSchema(ctx)
	defer drop()

	db, err := sql.Open("pgx", dsn)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	drv, err := outboxpgx.NewStdlib(db, outbox.Tables{})
	if err != nil {
		panic(err)
	}
	if err := drv.Migrate(ctx); err != nil {
		panic(err)
	}

	w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
	if err != nil {
		panic(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	err = w.Write(ctx, tx, outbox.Message{
		MsgID:   "order-42:OrderPlaced",
		Topic:   "order.placed",
		Payload: json.RawMessage(`{"order":42,"total":"19.90"}`),
	})
	if err != nil {
		tx.Rollback()
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	pub := outbox.PublishFunc(func(ctx context.Context, m outbox.Message) error {
		// The payload is stored as jsonb, so it comes back normalised.
		fmt.Println("publish:", m.Topic, m.MsgID, string(m.Payload))
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

	// Output:
	// publish: order.placed order-42:OrderPlaced {"order": 42, "total": "19.90"}
	// relay sent: 1
}

// The outbox insert can ride in the caller's own pgx batch: the order and
// its event reach the database in one round trip, and commit together.
func ExampleDriver_QueueWrite() {
	ctx := context.Background()
	pool, drv, w, done := exampleOrders(ctx) // set up as in Example
	defer done()

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var b pgx.Batch
		b.Queue("INSERT INTO orders (id, status) VALUES ($1, 'placed')", 42)
		if err := drv.QueueWrite(ctx, w, &b, outbox.Message{
			MsgID:   "order-42:OrderPlaced",
			Topic:   "order.placed",
			Payload: json.RawMessage(`{"order":42}`),
		}); err != nil {
			return err // invalid message: nothing was queued
		}
		// A msg_id already in the table comes back here as an
		// outbox.ErrDuplicate, and the transaction rolls back: the order
		// was recorded already.
		return tx.SendBatch(ctx, &b).Close()
	})
	if err != nil {
		panic(err)
	}
	printStats(ctx, drv)

	// Output:
	// pending=1 sent=0 dead=0
}

// WriteOnCommit sends the outbox insert together with the COMMIT: the order
// and its event commit together, and the outbox adds no round trip to the
// transaction.
func ExampleDriver_WriteOnCommit() {
	ctx := context.Background()
	_, drv, w, done := exampleOrders(ctx) // set up as in Example
	defer done()

	placeOrder := func(id int) error {
		return drv.WriteOnCommit(ctx, w, func(ctx context.Context, tx pgx.Tx) ([]outbox.Message, error) {
			if _, err := tx.Exec(ctx, "INSERT INTO orders (id, status) VALUES ($1, 'placed')", id); err != nil {
				return nil, err // rolled back: no order, no event
			}
			return []outbox.Message{{
				MsgID:   fmt.Sprintf("order-%d:OrderPlaced", id),
				Topic:   "order.placed",
				Payload: json.RawMessage(fmt.Sprintf(`{"order":%d}`, id)),
			}}, nil
		})
	}
	if err := placeOrder(42); err != nil {
		panic(err)
	}
	// The same order again: the orders table refuses it inside fn, and
	// nothing of this transaction commits.
	fmt.Println("again:", placeOrder(42) != nil)
	printStats(ctx, drv)

	// Output:
	// again: true
	// pending=1 sent=0 dead=0
}

// exampleOrders sets up the examples whose subject is one way of writing,
// as Example does: a migrated outbox in a schema of its own, an orders
// table, and a Writer. done closes the pool and drops the schema.
func exampleOrders(ctx context.Context) (pool *pgxpool.Pool, drv *outboxpgx.Driver, w *outbox.Writer[pgx.Tx], done func()) {
	dsn, drop := exampleSchema(ctx)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		panic(err)
	}
	done = func() { pool.Close(); drop() }
	if drv, err = outboxpgx.New(pool, outbox.Tables{}); err != nil {
		panic(err)
	}
	if err := drv.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE orders (id BIGINT PRIMARY KEY, status TEXT NOT NULL)"); err != nil {
		panic(err)
	}
	if w, err = outbox.NewWriter(drv, outbox.WriterConfig{}); err != nil {
		panic(err)
	}
	return pool, drv, w, done
}

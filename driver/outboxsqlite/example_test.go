package outboxsqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
	"github.com/outbox-go/outbox/outboxdriver"
)

// The whole loop: a business change and its message commit together, a relay
// publishes the message, and the consumer applies it once although it arrives
// twice.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	db, err := outboxsqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	drv, err := outboxsqlite.New(db, outbox.Tables{})
	if err != nil {
		panic(err)
	}
	if err := drv.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL);
		INSERT INTO orders (id, status) VALUES (42, 'new')`); err != nil {
		panic(err)
	}

	// The business transaction: the order is paid, and the event that says so
	// is written in the same transaction.
	w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
	if err != nil {
		panic(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE orders SET status = 'paid' WHERE id = 42`); err != nil {
		panic(err)
	}
	err = w.Write(ctx, tx, outbox.Message{
		MsgID:   "order-42:OrderPaid",
		Topic:   "order.paid",
		Key:     "order-42",
		Payload: json.RawMessage(`{"order":42,"amount":"19.90"}`),
	})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	// The relay: a slice stands in for the broker. Returning nil acknowledges
	// the message, and only then is it marked SENT.
	var broker []outbox.Message
	pub := outbox.PublishFunc(func(ctx context.Context, m outbox.Message) error {
		broker = append(broker, m)
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
	for _, m := range broker {
		fmt.Println("broker got:", m.Topic, m.MsgID, string(m.Payload))
	}

	// The consumer: its own table and the inbox, here in the same file. The
	// broker delivers at least once, so the message arrives twice.
	if _, err := db.ExecContext(ctx, `CREATE TABLE receipts (order_id INTEGER NOT NULL)`); err != nil {
		panic(err)
	}
	inbox := outbox.NewInbox(drv)
	for _, m := range []outbox.Message{broker[0], broker[0]} {
		applied, err := inbox.Process(ctx, "mailer", m.MsgID, func(ctx context.Context, tx *sql.Tx) error {
			var ev struct{ Order int }
			if err := json.Unmarshal(m.Payload, &ev); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO receipts (order_id) VALUES (?)`, ev.Order)
			return err
		})
		if err != nil {
			panic(err) // do not ack: the broker delivers again
		}
		fmt.Println("delivery applied:", applied) // ack either way
	}
	var receipts int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM receipts`).Scan(&receipts); err != nil {
		panic(err)
	}
	fmt.Println("receipts:", receipts)

	// Output:
	// relay sent: 1
	// broker got: order.paid order-42:OrderPaid {"order":42,"amount":"19.90"}
	// delivery applied: true
	// delivery applied: false
	// receipts: 1
}

// A msg_id that is already in the table is reported as ErrDuplicate. Nothing of
// the call is inserted, and the transaction stays usable: the business change
// can still commit.
func Example_duplicate() {
	ctx := context.Background()
	db, drv, cleanup := openTempOutbox(ctx)
	defer cleanup()

	w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
	if err != nil {
		panic(err)
	}
	paid := outbox.Message{MsgID: "order-42:OrderPaid", Topic: "order.paid", Payload: json.RawMessage(`{"order":42}`)}
	for attempt := 1; attempt <= 2; attempt++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		err = w.Write(ctx, tx, paid)
		var dup *outbox.DuplicateError
		switch {
		case errors.As(err, &dup):
			// The event was recorded by an earlier attempt; keep going.
			fmt.Println("attempt", attempt, "duplicate:", dup.MsgIDs)
		case err != nil:
			tx.Rollback()
			panic(err)
		default:
			fmt.Println("attempt", attempt, "written")
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}
	}
	st, err := drv.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("pending:", st.Pending)

	// Output:
	// attempt 1 written
	// attempt 2 duplicate: [order-42:OrderPaid]
	// pending: 1
}

// A message that breaks a limit is refused before it reaches the database, with
// a *ValidationError that names the field.
func Example_invalid() {
	ctx := context.Background()
	db, drv, cleanup := openTempOutbox(ctx)
	defer cleanup()

	w, err := outbox.NewWriter(drv, outbox.WriterConfig{MaxPayloadBytes: 16})
	if err != nil {
		panic(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback()

	err = w.Write(ctx, tx, outbox.Message{MsgID: "order-42:OrderPaid", Topic: "", Payload: json.RawMessage(`{}`)})
	var verr *outbox.ValidationError
	if errors.As(err, &verr) {
		fmt.Println("field:", verr.Field, "-", verr.Reason)
	}

	err = w.Write(ctx, tx, outbox.Message{MsgID: "order-42:OrderPaid", Topic: "order.paid",
		Payload: json.RawMessage(`{"order":42,"lines":[1,2,3]}`)})
	fmt.Println("too large:", errors.Is(err, outbox.ErrPayloadTooLarge))
	fmt.Println("invalid:", errors.Is(err, outbox.ErrInvalidMessage))

	// Output:
	// field: topic - empty; it is required
	// too large: true
	// invalid: true
}

// The inbox applies a message once per consumer group. When the consumer's
// change fails, nothing is recorded, so the next delivery tries again.
func Example_inbox() {
	ctx := context.Background()
	db, drv, cleanup := openTempOutbox(ctx)
	defer cleanup()
	if _, err := db.ExecContext(ctx, `CREATE TABLE points (customer TEXT NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		panic(err)
	}

	inbox := outbox.NewInbox(drv)
	award := func(fail bool) func(context.Context, *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO points VALUES ('alice', 20)`); err != nil {
				return err
			}
			if fail {
				return errors.New("loyalty service timed out")
			}
			return nil
		}
	}
	for i, fail := range []bool{true, false, false} {
		applied, err := inbox.Process(ctx, "points", "order-42:OrderPaid", award(fail))
		fmt.Printf("delivery %d: applied=%t err=%v\n", i+1, applied, err)
	}

	// A consumer that already has a transaction marks the message in it.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	fresh, err := inbox.MarkTx(ctx, tx, "mailer", "order-42:OrderPaid")
	if err != nil {
		panic(err)
	}
	fmt.Println("mailer fresh:", fresh)
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	var total int
	if err := db.QueryRowContext(ctx, `SELECT sum(amount) FROM points`).Scan(&total); err != nil {
		panic(err)
	}
	fmt.Println("points:", total)

	// Output:
	// delivery 1: applied=false err=loyalty service timed out
	// delivery 2: applied=true err=<nil>
	// delivery 3: applied=false err=<nil>
	// mailer fresh: true
	// points: 20
}

// What the relay does with each answer of the publisher: an ack marks the
// message SENT, a refusal spends one retry and schedules the next attempt, and
// an unreachable broker (outbox.Unavailable) leaves the message as it was.
func Example_relay() {
	ctx := context.Background()
	db, drv, cleanup := openTempOutbox(ctx)
	defer cleanup()
	commitMessages(ctx, db, drv,
		outbox.Message{MsgID: "m1", Topic: "order.paid", Payload: json.RawMessage(`{"order":1}`)},
		outbox.Message{MsgID: "m2", Topic: "order.paid", Payload: json.RawMessage(`{"order":2}`)},
		outbox.Message{MsgID: "m3", Topic: "order.paid", Payload: json.RawMessage(`{"order":3}`)},
	)

	pub := outbox.PublishFunc(func(ctx context.Context, m outbox.Message) error {
		switch m.MsgID {
		case "m2":
			return errors.New("rejected: schema mismatch")
		case "m3":
			return outbox.Unavailable(errors.New("connection refused"))
		}
		return nil
	})
	relay, err := outbox.NewRelay(drv, pub, outbox.RelayConfig{MaxRetries: 5, RetryBudget: -1})
	if err != nil {
		panic(err)
	}
	rep, err := relay.RunOnce(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("sent=%d retried=%d released=%d dead=%d\n", rep.Sent, rep.Retried, rep.Released, rep.Dead)

	for _, id := range []string{"m1", "m2", "m3"} {
		m, err := drv.GetMessage(ctx, id)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %s retries=%d last_error=%q\n", m.MsgID, m.Status, m.Retries, m.LastError)
	}
	_, err = drv.GetMessage(ctx, "m4")
	fmt.Println("m4 not found:", errors.Is(err, outbox.ErrNotFound))

	// Output:
	// sent=1 retried=1 released=1 dead=0
	// m1: SENT retries=0 last_error=""
	// m2: NEW retries=1 last_error="rejected: schema mismatch"
	// m3: NEW retries=0 last_error=""
	// m4 not found: true
}

// slowestStage is a BatchHook that notes which part of each batch took
// longest: the store's claim, the broker's publish or the mark. Summed over
// time, the same three durations tell whether the database or the broker
// sets a relay's pace (outbox bench prints them as shares of a relay's time).
type slowestStage struct{ lines []string }

func (h *slowestStage) OnBatch(_ context.Context, rep outbox.BatchReport) {
	stage, d := "claim", rep.ClaimDuration
	if rep.PublishDuration > d {
		stage, d = "publish", rep.PublishDuration
	}
	if rep.MarkDuration > d {
		stage = "mark"
	}
	h.lines = append(h.lines, fmt.Sprintf("%d messages, slowest stage: %s", len(rep.Results), stage))
}

// A BatchHook sees every finished batch, with the time its claim, publish
// and mark took.
func Example_batchHook() {
	ctx := context.Background()
	db, drv, cleanup := openTempOutbox(ctx)
	defer cleanup()
	var msgs []outbox.Message
	for _, id := range []string{"m1", "m2", "m3"} {
		msgs = append(msgs, outbox.Message{MsgID: id, Topic: "order.paid", Payload: json.RawMessage(`{}`)})
	}
	commitMessages(ctx, db, drv, msgs...)

	// A broker that takes its time to ack.
	slowBroker := outbox.BatchPublishFunc(func(ctx context.Context, msgs []outbox.Message) []error {
		time.Sleep(200 * time.Millisecond)
		return nil
	})
	hook := &slowestStage{}
	relay, err := outbox.NewRelay(drv, slowBroker, outbox.RelayConfig{Hooks: []any{hook}})
	if err != nil {
		panic(err)
	}
	if _, err := relay.RunOnce(ctx); err != nil {
		panic(err)
	}
	fmt.Println(strings.Join(hook.lines, "\n"))

	// Output:
	// 3 messages, slowest stage: publish
}

// commitMessages writes msgs in a transaction of their own and commits it.
func commitMessages(ctx context.Context, db *sql.DB, drv outboxdriver.Driver[*sql.Tx], msgs ...outbox.Message) {
	w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
	if err != nil {
		panic(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	if err := w.Write(ctx, tx, msgs...); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
}

// openTempOutbox makes a migrated outbox in a fresh SQLite file; cleanup
// closes it and removes the file.
func openTempOutbox(ctx context.Context) (db *sql.DB, drv outboxdriver.Driver[*sql.Tx], cleanup func()) {
	dir, err := os.MkdirTemp("", "outbox-example-")
	if err != nil {
		panic(err)
	}
	db, err = outboxsqlite.Open(filepath.Join(dir, "outbox.db"))
	if err != nil {
		panic(err)
	}
	cleanup = func() {
		db.Close()
		os.RemoveAll(dir)
	}
	d, err := outboxsqlite.New(db, outbox.Tables{})
	if err != nil {
		cleanup()
		panic(err)
	}
	if err := d.Migrate(ctx); err != nil {
		cleanup()
		panic(err)
	}
	return db, d, cleanup
}

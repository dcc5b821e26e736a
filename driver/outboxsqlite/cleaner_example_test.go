package outboxsqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/outbox-go/outbox"
)

// A Cleaner deletes SENT messages and inbox records once they are old
// enough; NEW and DEAD messages stay. Run calls RunOnce every Interval.
func Example_cleaner() {
	ctx := context.Background()
	db, drv, cleanup := openTempOutbox(ctx)
	defer cleanup()
	commitMessages(ctx, db, drv,
		outbox.Message{MsgID: "order-1:OrderPaid", Topic: "order.paid", Payload: json.RawMessage(`{"order":1}`)},
		outbox.Message{MsgID: "order-2:OrderPaid", Topic: "order.paid", Payload: json.RawMessage(`{"order":2}`)},
	)
	relay, err := outbox.NewRelay(drv, outbox.Discard, outbox.RelayConfig{})
	if err != nil {
		panic(err)
	}
	if _, err := relay.RunOnce(ctx); err != nil {
		panic(err)
	}
	if _, err := outbox.NewInbox(drv).Process(ctx, "billing", "order-1:OrderPaid", func(context.Context, *sql.Tx) error { return nil }); err != nil {
		panic(err)
	}
	commitMessages(ctx, db, drv, outbox.Message{MsgID: "order-3:OrderPaid", Topic: "order.paid", Payload: json.RawMessage(`{"order":3}`)})

	// An age of an hour: nothing is that old yet.
	c, err := outbox.NewCleaner(drv, outbox.CleanerConfig{OlderThan: time.Hour, InboxOlderThan: time.Hour})
	if err != nil {
		panic(err)
	}
	rep, err := c.RunOnce(ctx)
	fmt.Printf("after an hour's age: sent=%d consumed=%d err=%v\n", rep.Sent, rep.Consumed, err)

	// A very short age, as a test would use: the two SENT messages and the
	// inbox record go; order-3, still NEW, stays.
	time.Sleep(20 * time.Millisecond)
	c, err = outbox.NewCleaner(drv, outbox.CleanerConfig{OlderThan: 10 * time.Millisecond, InboxOlderThan: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	rep, err = c.RunOnce(ctx)
	fmt.Printf("after 10ms: sent=%d consumed=%d err=%v\n", rep.Sent, rep.Consumed, err)
	st, err := drv.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("left: pending=%d sent=%d\n", st.Pending, st.Sent)

	// Output:
	// after an hour's age: sent=0 consumed=0 err=<nil>
	// after 10ms: sent=2 consumed=1 err=<nil>
	// left: pending=1 sent=0
}

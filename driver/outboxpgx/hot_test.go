package outboxpgx_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox"
)

// TestSentUpdateIsHOT: the relay's SENT update must stay a HOT update (the
// new row version on the same page, no index entry), which PostgreSQL makes
// only while no index names a column the update changes (status, sent_at),
// in its columns or in a partial index's predicate. An index on the DEAD
// rows that named status would make every SENT update write to every index.
func TestSentUpdateIsHOT(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dsn := newSchema(t)
	pool, d := migratedPool(ctx, t, dsn, 0)
	w, err := outbox.NewWriter(d, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	for i := 0; i < n; i += 100 {
		msgs := make([]outbox.Message, 100)
		for j := range msgs {
			msgs[j] = outbox.Message{MsgID: fmt.Sprintf("hot-%04d", i+j), Topic: "t", Payload: []byte(`{"n":1}`)}
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
			t.Fatal(err)
		}
	}
	r, err := outbox.NewRelay(d, outbox.BatchPublishFunc(func(context.Context, []outbox.Message) []error { return nil }),
		outbox.RelayConfig{BatchSize: 100, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	for {
		rep, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Results) == 0 {
			break
		}
		sent += rep.Sent
	}
	if sent != n {
		t.Fatalf("relayed %d, want %d", sent, n)
	}
	// A backend reports its table statistics when it has been idle a while,
	// or when it exits: closing the pool ends the relay's backends.
	pool.Close()
	var upd, hot int64
	for deadline := time.Now().Add(20 * time.Second); ; {
		err := admin.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
WHERE schemaname = $1 AND relname = 'outbox'`, schemaOf(dsn)).Scan(&upd, &hot)
		if err != nil {
			t.Fatal(err)
		}
		if upd >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d updates, %d of them HOT", upd, hot)
	// A few new versions find no room on their page (fillfactor 50 leaves
	// about one row's room per row, less its line pointer): 386 of 400 were
	// HOT here, with and without the DEAD index. An index that named status
	// makes none HOT.
	if upd < n || hot*10 < upd*9 {
		t.Fatalf("%d updates of the outbox table, %d of them HOT; want %d, at least 90%% HOT", upd, hot, n)
	}
}

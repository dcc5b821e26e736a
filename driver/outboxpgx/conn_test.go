package outboxpgx_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/outboxdriver"
)

// TestRelaySurvivesKilledConnections terminates the relay's database sessions
// again and again while it works: each batch in flight is rolled back by the
// server, the relay pauses and goes on, and in the end every message is SENT,
// none lost, none with a retry spent (a lost connection is not a refusal).
func TestRelaySurvivesKilledConnections(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dsn := newSchema(t) + "&application_name=outbox_killed_relay"
	pool, d := migratedPool(ctx, t, dsn, 0)
	const n = 3000
	w, _ := outbox.NewWriter(d, outbox.WriterConfig{})
	for start := 0; start < n; start += 500 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var msgs []outbox.Message
			for i := start; i < start+500; i++ {
				msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("k-%d", i), Topic: "t", Payload: json.RawMessage(`{}`)})
			}
			return w.Write(ctx, tx, msgs...)
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	seen := map[string]int{}
	pub := outbox.BatchPublishFunc(func(_ context.Context, msgs []outbox.Message) []error {
		mu.Lock()
		for _, m := range msgs {
			seen[m.MsgID]++
		}
		mu.Unlock()
		time.Sleep(2 * time.Millisecond) // widen the window between publish and mark
		return nil
	})
	// A kill can also end the statement that gives a failed batch's claim
	// back; its rows then wait for the lease to run out (2×PublishTimeout),
	// which must end well before the deadline below.
	relay, err := outbox.NewRelay(d, pub, outbox.RelayConfig{BatchSize: 100, Interval: 10 * time.Millisecond,
		PauseBase: 10 * time.Millisecond, PauseMax: 50 * time.Millisecond, PublishTimeout: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()

	kills := 0
	for i := 0; i < 40; i++ {
		time.Sleep(15 * time.Millisecond)
		var k int
		// Only sessions at work: an idle pooled one would just be replaced.
		if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = 'outbox_killed_relay' AND state <> 'idle'`).Scan(&k); err != nil {
			t.Fatal(err)
		}
		kills += k
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var pending int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schemaOf(dsn), "outbox"}.Sanitize()+` WHERE status = 0`).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages still NEW after the kills stopped", pending)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if kills == 0 {
		t.Fatal("no relay session was terminated: the test tested nothing")
	}
	st, err := d.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent != n || st.Pending != 0 || st.Dead != 0 {
		t.Fatalf("stats after the kills: %+v", st)
	}
	var retried int
	pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE retries > 0`).Scan(&retried)
	if retried != 0 {
		t.Fatalf("%d messages spent a retry on a lost connection", retried)
	}
	dups := 0
	for i := 0; i < n; i++ {
		c := seen[fmt.Sprintf("k-%d", i)]
		if c == 0 {
			t.Fatalf("k-%d was never published", i)
		}
		dups += c - 1
	}
	t.Logf("%d sessions terminated; %d messages published again after a lost mark", kills, dups)
}

// migratedPool opens a pool on dsn (maxConns 0: pgxpool's default), closed
// at the end of the test, and a driver whose tables are migrated.
func migratedPool(ctx context.Context, t *testing.T, dsn string, maxConns int32) (*pgxpool.Pool, *outboxpgx.Driver) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := outboxpgx.New(pool, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return pool, d
}

func schemaOf(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		panic(err)
	}
	return cfg.RuntimeParams["search_path"]
}

// TestClaimAfterServerClosedPooledConnections: after a failover or a
// pg_terminate_backend, every idle connection in the pool is dead, and the
// pool hands one out unchecked when it was used within the last second. The
// claim begins on another connection instead of failing (each failure cost
// the relay a pause, doubled for each further dead connection).
func TestClaimAfterServerClosedPooledConnections(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const maxConns = 4
	pool, d := migratedPool(ctx, t, newSchema(t)+"&application_name=outbox_closed_pool", maxConns)
	w, _ := outbox.NewWriter(d, outbox.WriterConfig{})
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return w.Write(ctx, tx, outbox.Message{MsgID: "after-failover", Topic: "t", Payload: json.RawMessage(`{}`)})
	}); err != nil {
		t.Fatal(err)
	}
	// Fill the pool with idle connections, then have the server close them.
	var held []*pgxpool.Conn
	for range maxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.Release()
	}
	var killed int
	if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'outbox_closed_pool'`).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed != maxConns {
		t.Fatalf("terminated %d sessions, want the pool's %d", killed, maxConns)
	}
	time.Sleep(100 * time.Millisecond) // the backends exit and close their sockets

	claim, err := d.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatalf("claim with every pooled connection closed by the server: %v", err)
	}
	defer claim.Abort(ctx)
	if got := claim.Messages(); len(got) != 1 || got[0].MsgID != "after-failover" {
		t.Fatalf("claimed %v", got)
	}
}

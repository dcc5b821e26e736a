package outboxpgx_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/internal/testbroker"
	"github.com/outbox-go/outbox/outboxdriver"
)

// logicalCluster is a private cluster with wal_level = logical for the
// tests of one function; each subtest takes a database of its own (a
// publication belongs to one database).
type logicalCluster struct {
	pg    *testbroker.Postgres
	admin *pgxpool.Pool
	n     atomic.Int32
}

func startLogical(t *testing.T) *logicalCluster {
	t.Helper()
	pg := testbroker.StartPostgres(t, "wal_level = logical\nmax_replication_slots = 20\nmax_wal_senders = 20\nwal_sender_timeout = 10s\n")
	admin, err := pgxpool.New(context.Background(), pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return &logicalCluster{pg: pg, admin: admin}
}

// driver returns a migrated driver on a new database of the cluster.
func (c *logicalCluster) driver(t *testing.T) (*outboxpgx.Driver, *pgxpool.Pool) {
	t.Helper()
	db := fmt.Sprintf("s%d", c.n.Add(1))
	if _, err := c.admin.Exec(context.Background(), "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	dsn := strings.Replace(c.pg.DSN(), "/postgres?", "/"+db+"?", 1)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := outboxpgx.New(pool, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return d, pool
}

// insert writes one message with plain SQL, as a writer in another language would.
func insert(t *testing.T, pool *pgxpool.Pool, id, key string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO outbox (msg_id, topic, msg_key, payload) VALUES ($1, 't', nullif($2, ''), '{}')`, id, key); err != nil {
		t.Fatal(err)
	}
}

// recorder is a publisher that records every message it acks, in order.
type recorder struct {
	mu    sync.Mutex
	ids   []string
	count map[string]int
	// refuse, while set, answers every message unavailable.
	refuse atomic.Bool
	// gate, when set, is waited for before each publish.
	gate chan struct{}
}

func (r *recorder) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
		}
	}
	errs := make([]error, len(msgs))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.count == nil {
		r.count = map[string]int{}
	}
	for i, m := range msgs {
		if r.refuse.Load() {
			errs[i] = outbox.Unavailable(errors.New("broker down"))
			continue
		}
		r.ids = append(r.ids, m.MsgID)
		r.count[m.MsgID]++
	}
	return errs
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

func (r *recorder) dups() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d []string
	for id, n := range r.count {
		if n > 1 {
			d = append(d, id)
		}
	}
	return d
}

// startCDC runs a CDC relay until the test ends or stop is called.
func startCDC(t *testing.T, d *outboxpgx.Driver, pub outbox.Publisher, cfg outbox.RelayConfig) (stop func()) {
	t.Helper()
	cfg.CDC = true
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := outbox.NewRelay(d, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond every 20ms for up to d.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slotActive reports whether the CDC slot exists and a stream reads it.
func slotActive(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active`, outboxpgx.SlotName("outbox")).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func pending(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE status <> 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestStream(t *testing.T) {
	c := startLogical(t)
	t.Run("CommitOrder", func(t *testing.T) { testStreamCommitOrder(t, c) })
	t.Run("RelayCommitOrderOfKey", func(t *testing.T) { testRelayCommitOrder(t, c) })
	t.Run("KilledMidStream", func(t *testing.T) { testKilledMidStream(t, c) })
	t.Run("SlotDropped", func(t *testing.T) { testSlotDropped(t, c) })
	t.Run("TwoRelays", func(t *testing.T) { testTwoRelays(t, c) })
	t.Run("BrokerOutage", func(t *testing.T) { testBrokerOutage(t, c) })
	t.Run("ConfirmedAfterAck", func(t *testing.T) { testConfirmedAfterAck(t, c) })
	t.Run("WatchByStream", func(t *testing.T) { testWatchByStream(t, c) })
	t.Run("NoReplicationRole", func(t *testing.T) { testNoReplicationRole(t, c) })
}

// testStreamCommitOrder: a transaction that took the smaller id but
// commits late comes after the one that committed first.
func testStreamCommitOrder(t *testing.T, c *logicalCluster) {
	d, pool := c.driver(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan []outbox.Message, 10)
	done := make(chan error, 1)
	go func() {
		done <- d.Stream(ctx, func(_ context.Context, msgs []outbox.Message) error {
			got <- msgs
			return nil
		})
	}()
	waitFor(t, "the slot", 10*time.Second, func() bool { return slotActive(t, pool) })
	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := late.Exec(ctx, `INSERT INTO outbox (msg_id, topic, payload, headers) VALUES ('late', 't', '{"a":1}', '{"h":"v"}')`); err != nil {
		t.Fatal(err)
	}
	insert(t, pool, "early", "")
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var order []outbox.Message
	for len(order) < 2 {
		select {
		case msgs := <-got:
			order = append(order, msgs...)
		case err := <-done:
			t.Fatalf("Stream ended: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("streamed %d of 2", len(order))
		}
	}
	if order[0].MsgID != "early" || order[1].MsgID != "late" {
		t.Fatalf("order %s, %s; want early, late (commit order)", order[0].MsgID, order[1].MsgID)
	}
	if order[1].ID >= order[0].ID || string(order[1].Payload) != `{"a": 1}` || order[1].Headers["h"] != "v" || order[1].Topic != "t" {
		t.Fatalf("decoded %+v", order[1])
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Stream after cancel: %v", err)
	}
}

// testRelayCommitOrder: the CDC relay publishes two messages of one key in
// their transactions' commit order, not in id order.
func testRelayCommitOrder(t *testing.T, c *logicalCluster) {
	d, pool := c.driver(t)
	rec := &recorder{}
	startCDC(t, d, rec, outbox.RelayConfig{SweepInterval: time.Hour})
	waitFor(t, "the slot", 10*time.Second, func() bool { return slotActive(t, pool) })
	ctx := context.Background()
	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := late.Exec(ctx, `INSERT INTO outbox (msg_id, topic, msg_key, payload) VALUES ('k-late', 't', 'k', '{}')`); err != nil {
		t.Fatal(err)
	}
	insert(t, pool, "k-early", "k")
	waitFor(t, "k-early", 10*time.Second, func() bool { return len(rec.seen()) == 1 })
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "k-late", 10*time.Second, func() bool { return len(rec.seen()) == 2 })
	if s := rec.seen(); s[0] != "k-early" || s[1] != "k-late" {
		t.Fatalf("published %v; want commit order", s)
	}
	waitFor(t, "both SENT", 5*time.Second, func() bool { return pending(t, pool) == 0 })
}

// testKilledMidStream: a relay stopped while messages stream, and another
// started after it: every message is SENT, none lost.
func testKilledMidStream(t *testing.T, c *logicalCluster) {
	d, pool := c.driver(t)
	rec := &recorder{}
	// A claim cut off as it committed holds its rows for the lease, as
	// after a crash: a short one.
	cfg := outbox.RelayConfig{SweepInterval: 200 * time.Millisecond, PublishTimeout: time.Second, Lease: 3 * time.Second}
	stop := startCDC(t, d, rec, cfg)
	waitFor(t, "the slot", 10*time.Second, func() bool { return slotActive(t, pool) })
	const n = 300
	for i := range n {
		insert(t, pool, fmt.Sprintf("m%d", i), fmt.Sprintf("k%d", i%7))
		if i == n/2 {
			stop()
			// The pool's connections die with the relay's process.
			if _, err := c.admin.Exec(context.Background(), `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE active`); err != nil {
				t.Fatal(err)
			}
		}
	}
	startCDC(t, d, rec, cfg)
	waitFor(t, "every message SENT", 30*time.Second, func() bool { return pending(t, pool) == 0 })
	if got := len(rec.seen()); got < n {
		t.Fatalf("published %d of %d", got, n)
	}
}

// testSlotDropped: an operator ends the stream's backend (which drops its
// temporary slot): the relay streams again and nothing is lost.
func testSlotDropped(t *testing.T, c *logicalCluster) {
	d, pool := c.driver(t)
	rec := &recorder{}
	startCDC(t, d, rec, outbox.RelayConfig{SweepInterval: 300 * time.Millisecond, PauseBase: 50 * time.Millisecond})
	waitFor(t, "the slot", 10*time.Second, func() bool { return slotActive(t, pool) })
	insert(t, pool, "before", "")
	waitFor(t, "before", 10*time.Second, func() bool { return len(rec.seen()) == 1 })
	if _, err := pool.Exec(context.Background(), `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1`, outboxpgx.SlotName("outbox")); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		insert(t, pool, fmt.Sprintf("after%d", i), "")
	}
	waitFor(t, "every message SENT", 20*time.Second, func() bool { return pending(t, pool) == 0 })
	waitFor(t, "the slot again", 20*time.Second, func() bool { return slotActive(t, pool) })
	insert(t, pool, "streamed", "")
	waitFor(t, "streamed", 10*time.Second, func() bool { return len(rec.seen()) == 52 })
	if d := rec.dups(); len(d) > 0 {
		t.Fatalf("published twice: %v", d)
	}
}

// testTwoRelays: two CDC relays on one table: one streams, the other
// stands by; no message is published twice; the standby takes over.
func testTwoRelays(t *testing.T, c *logicalCluster) {
	d, pool := c.driver(t)
	rec := &recorder{}
	stop1 := startCDC(t, d, rec, outbox.RelayConfig{})
	waitFor(t, "the slot", 10*time.Second, func() bool { return slotActive(t, pool) })
	d2, err := outboxpgx.New(pool, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	startCDC(t, d2, rec, outbox.RelayConfig{})
	for i := range 400 {
		insert(t, pool, fmt.Sprintf("m%d", i), fmt.Sprintf("k%d", i%5))
	}
	waitFor(t, "every message SENT", 20*time.Second, func() bool { return pending(t, pool) == 0 })
	if d := rec.dups(); len(d) > 0 {
		t.Fatalf("published twice: %v", d)
	}
	stop1()
	waitFor(t, "the standby's slot", 20*time.Second, func() bool { return slotActive(t, pool) })
	insert(t, pool, "after", "")
	waitFor(t, "after", 10*time.Second, func() bool { return pending(t, pool) == 0 })
	if d := rec.dups(); len(d) > 0 {
		t.Fatalf("published twice: %v", d)
	}
}

// testBrokerOutage: while the broker is down nothing is marked; once it is
// back every message is SENT, each acked once.
func testBrokerOutage(t *testing.T, c *logicalCluster) {
	d, pool := c.driver(t)
	rec := &recorder{}
	rec.refuse.Store(true)
	startCDC(t, d, rec, outbox.RelayConfig{SweepInterval: 200 * time.Millisecond, ProbeInterval: 100 * time.Millisecond, PauseBase: 50 * time.Millisecond})
	waitFor(t, "the slot", 10*time.Second, func() bool { return slotActive(t, pool) })
	for i := range 40 {
		insert(t, pool, fmt.Sprintf("m%d", i), "")
	}
	time.Sleep(500 * time.Millisecond)
	if p := pending(t, pool); p != 40 {
		t.Fatalf("%d pending during the outage, want 40", p)
	}
	var retried int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE retries > 0`).Scan(&retried); err != nil || retried != 0 {
		t.Fatalf("an outage spent retries on %d messages (%v)", retried, err)
	}
	rec.refuse.Store(false)
	waitFor(t, "every message SENT", 20*time.Second, func() bool { return pending(t, pool) == 0 })
	if d := rec.dups(); len(d) > 0 {
		t.Fatalf("acked twice: %v", d)
	}
}

// testConfirmedAfterAck: the slot's confirmed position does not pass a
// message's commit before the broker acked it and the row is SENT.
func testConfirmedAfterAck(t *testing.T, c *logicalCluster) {
	d, pool := c.driver(t)
	rec := &recorder{gate: make(chan struct{})}
	startCDC(t, d, rec, outbox.RelayConfig{SweepInterval: time.Hour})
	waitFor(t, "the slot", 10*time.Second, func() bool { return slotActive(t, pool) })
	ctx := context.Background()
	insert(t, pool, "held", "")
	var lsn string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	confirmedPast := func() bool {
		var past bool
		err := pool.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn >= $2::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $1`,
			outboxpgx.SlotName("outbox"), lsn).Scan(&past)
		if err != nil {
			t.Fatal(err)
		}
		return past
	}
	for range 15 {
		time.Sleep(100 * time.Millisecond)
		if confirmedPast() {
			t.Fatal("the slot confirmed the message's commit before the broker's ack")
		}
	}
	if pending(t, pool) != 1 {
		t.Fatal("the row is not NEW while its publish waits")
	}
	close(rec.gate)
	waitFor(t, "SENT", 10*time.Second, func() bool { return pending(t, pool) == 0 })
	waitFor(t, "the position confirmed", 15*time.Second, confirmedPast)
}

// testWatchByStream: a polling relay's Watcher learns of a plain SQL
// insert through the stream.
func testWatchByStream(t *testing.T, c *logicalCluster) {
	d, pool := c.driver(t)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var vias []string
	var fallback error
	done := make(chan error, 1)
	go func() {
		done <- d.Watch(ctx, func(ch outboxdriver.Change) {
			mu.Lock()
			vias = append(vias, ch.Via)
			if ch.Fallback != nil {
				fallback = ch.Fallback
			}
			mu.Unlock()
		})
	}()
	has := func(v string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, x := range vias {
			if x == v {
				return true
			}
		}
		return false
	}
	waitFor(t, "the watch to start", 10*time.Second, func() bool { return has("start") })
	insert(t, pool, "w1", "")
	waitFor(t, "a stream change", 10*time.Second, func() bool { return has("stream") })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if fallback != nil {
		t.Fatalf("fell back: %v", fallback)
	}
}

// testNoReplicationRole: a role without REPLICATION gets
// ErrStreamUnavailable, with the statement that grants it.
func testNoReplicationRole(t *testing.T, c *logicalCluster) {
	_, pool := c.driver(t)
	ctx := context.Background()
	var db string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`CREATE ROLE norepl_` + db + ` LOGIN`, `GRANT ALL ON ALL TABLES IN SCHEMA public TO norepl_` + db} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	dsn := strings.Replace(strings.Replace(c.pg.DSN(), "/postgres?", "/"+db+"?", 1), "postgres@", "norepl_"+db+"@", 1)
	np, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer np.Close()
	d, err := outboxpgx.New(np, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Stream(ctx, func(context.Context, []outbox.Message) error { return nil })
	if !errors.Is(err, outboxdriver.ErrStreamUnavailable) || !strings.Contains(err.Error(), "REPLICATION") {
		t.Fatalf("Stream as a role without REPLICATION: %v", err)
	}
}

// TestStreamUnavailableOnReplica: on the shared server (wal_level =
// replica) Stream says what to change, and a CDC relay logs it once and
// delivers by polling.
func TestStreamUnavailableOnReplica(t *testing.T) {
	ctx := context.Background()
	dsn := newSchema(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var level string
	if err := pool.QueryRow(ctx, `SHOW wal_level`).Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level == "logical" {
		t.Fatalf("the fall-back test needs a server with wal_level below logical; %s has %s", baseDSN(), level)
	}
	d, err := outboxpgx.New(pool, outbox.Tables{Outbox: "pgstream_outbox", Inbox: "pgstream_inbox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	err = d.Stream(ctx, func(context.Context, []outbox.Message) error { return nil })
	if !errors.Is(err, outboxdriver.ErrStreamUnavailable) || !strings.Contains(err.Error(), "wal_level = logical") {
		t.Fatalf("Stream on wal_level %s: %v", level, err)
	}
	var logs syncBuffer
	rec := &recorder{}
	startCDC(t, d, rec, outbox.RelayConfig{Interval: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	waitFor(t, "the fall-back log", 10*time.Second, func() bool { return strings.Contains(logs.String(), "polling instead") })
	time.Sleep(100 * time.Millisecond) // the Watcher LISTENs
	if _, err := pool.Exec(ctx, `INSERT INTO pgstream_outbox (msg_id, topic, payload) VALUES ('r1', 't', '{}')`); err != nil {
		t.Fatal(err)
	}
	d.Notify()
	waitFor(t, "r1 by polling", 10*time.Second, func() bool { return len(rec.seen()) == 1 })
	if n := strings.Count(logs.String(), "cannot stream"); n != 1 {
		t.Fatalf("the fall-back was logged %d times, want once:\n%s", n, logs.String())
	}
}

// syncBuffer is a bytes.Buffer for a logger on several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

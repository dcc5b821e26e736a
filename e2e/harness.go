// Package e2e runs the whole path of the outbox through each real broker:
// business transactions on PostgreSQL write their messages to the outbox
// table, a real relay publishes them, the broker adapter's subscriber applies
// them through the inbox to a second database (a SQLite file), and the test
// checks the promise of the seeds: every committed message has exactly one
// effect, and no rolled-back transaction has any.
//
// Along the way Run makes the failures the outbox exists for: a relay that
// stops between publish and mark (its batch must still be NEW, and is
// published again by the next relay), a broker that refuses a message once
// (it must be retried, not marked SENT), duplicate deliveries, a handler that
// fails and is redelivered, a consumer's change that fails after its inbox
// record was written and a consumer transaction that fails at its commit
// (neither may leave the inbox record behind, nor the change), and a broker
// restart while everything runs. The check compares every effect with the
// transfer its committed transaction wrote.
package e2e

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/brokertest"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
)

// Broker is the adapter under test, pointed at a broker the test owns.
type Broker struct {
	// Name names the broker in messages.
	Name string
	// Topic is the topic of the rows; the publisher routes it to the
	// destination the subscribers consume.
	Topic string
	// NewPublisher returns a new publisher on each call; Run closes it when
	// it is an io.Closer.
	NewPublisher func(t *testing.T) outbox.Publisher
	// NewSubscriber returns a subscriber of group on the destination.
	NewSubscriber func(t *testing.T, group string) brokertest.Subscriber
	// Restart stops the broker and starts it again on the same port with
	// the same data. Nil when the test cannot restart it.
	Restart func(t *testing.T)
}

// Scenario sizes. Every tenth transaction rolls back.
const (
	transactions = 600
	producers    = 4
	group        = "e2e-consumer"
	// crashAfter is the batch after whose publish the first relay "dies"
	// before marking it.
	crashAfter = 3
	// duplicates is how many already-delivered messages are published again.
	duplicates = 40
)

// PostgresDSN is the producer's server; the test fails, not skips, when it is down.
func PostgresDSN() string {
	if dsn := os.Getenv("OUTBOX_TEST_POSTGRES"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// Run runs the scenario through b and checks the outcome.
func Run(t *testing.T, b Broker) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h := newHarness(ctx, t, b)
	stopSub := h.startSubscriber(ctx, t)
	prodWG := h.startProducers(ctx, t)
	h.runCrashingRelay(ctx, t)

	// Relay 2 takes over and publishes the unmarked batch again. Its broker
	// refuses the first attempt of some messages (refusingPublisher): each
	// must be retried, not marked SENT.
	pub2 := b.NewPublisher(t)
	defer closeIfCloser(pub2)
	refusing := &refusingPublisher{Publisher: pub2, h: h}
	stopRelay2 := h.startRelay2(ctx, t, refusing)
	h.disturb(ctx, t, pub2)

	prodWG.Wait()
	committed := h.committedIDs()
	h.waitEffects(ctx, t, len(committed), "every committed message's effect")
	h.waitOutboxDrained(ctx, t)
	// Let stray redeliveries arrive before counting.
	time.Sleep(time.Second)
	if err := stopRelay2(); err != nil {
		t.Errorf("relay 2: %v", err)
	}
	stopSub()
	h.check(t, committed)
	t.Logf("%s: the broker refused %d messages once (relay 2)", b.Name, refusing.refused.Load())
	if refusing.refused.Load() == 0 {
		t.Errorf("%s: the broker refused no message, so the relay's retry path was not exercised", b.Name)
	}
}

// startSubscriber runs the broker's subscriber of group in the background;
// the function it returns stops it and reports on t an error it returned,
// or its not stopping within 30s.
func (h *harness) startSubscriber(ctx context.Context, t *testing.T) (stop func()) {
	// The subscriber exists before anything is published, so that brokers
	// that keep nothing for absent consumers (MQTT) lose nothing.
	sub := h.b.NewSubscriber(t, group)
	t.Cleanup(func() { closeIfCloser(sub) })
	subCtx, stopSub := context.WithCancel(ctx)
	subDone := make(chan error, 1)
	go func() { subDone <- sub.Run(subCtx, h.handler()) }()
	return func() {
		stopSub()
		select {
		case err := <-subDone:
			if err != nil {
				t.Errorf("subscriber: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("subscriber did not stop within 30s")
		}
	}
}

// startProducers starts the producers, which commit business transactions
// while the relays run; Wait on the group returned waits for them.
func (h *harness) startProducers(ctx context.Context, t *testing.T) *sync.WaitGroup {
	var prodWG sync.WaitGroup
	for p := range producers {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			h.produce(ctx, t, p)
		}()
	}
	return &prodWG
}

// runCrashingRelay runs relay 1 until it "dies" between publish and mark,
// and checks that the batch it died on is still NEW.
func (h *harness) runCrashingRelay(ctx context.Context, t *testing.T) {
	// Relay 1 publishes crashAfter batches, then "dies" after publishing the
	// next one and before marking it: its publisher reports the broker as
	// unavailable, so the rows stay NEW, and the relay stops.
	pub1 := h.b.NewPublisher(t)
	crash := &crashingPublisher{Publisher: pub1, after: crashAfter}
	relayCtx1, stopRelay1 := context.WithCancel(ctx)
	crash.crash = stopRelay1
	if err := h.newRelay(t, crash).Run(relayCtx1); err != nil {
		t.Fatalf("relay 1: %v", err)
	}
	closeIfCloser(pub1)
	if !crash.crashed.Load() {
		t.Fatalf("relay 1 stopped before its crash point (%d batches published)", crash.batches.Load())
	}
	t.Logf("%s: relay 1 died after publishing batch %d unmarked (%d messages)", h.b.Name, crash.batches.Load(), crash.lost.Load())
	// The batch it died on was never marked: its rows must all still be NEW,
	// or relay 2 would not publish them again and the "crash" would prove
	// nothing (a relay that marks SENT what the publisher failed loses
	// messages whenever the failure was real).
	h.checkStillNew(ctx, t, crash.lostIDs)
}

// startRelay2 runs relay 2 on pub in the background; the function it
// returns stops it and returns the error its Run returned.
func (h *harness) startRelay2(ctx context.Context, t *testing.T, pub outbox.Publisher) (stop func() error) {
	relayCtx2, stopRelay2 := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- h.newRelay(t, pub).Run(relayCtx2) }()
	return func() error {
		stopRelay2()
		return <-relayDone
	}
}

// disturb publishes duplicates of delivered messages on pub and, where the
// test can, restarts the broker while producers, relay and subscriber run.
func (h *harness) disturb(ctx context.Context, t *testing.T, pub outbox.Publisher) {
	// Duplicate deliveries: messages already applied are published again.
	h.waitEffects(ctx, t, duplicates*2, "first effects")
	h.publishDuplicates(ctx, t, pub)

	// The broker restarts while producers, relay and subscriber run.
	if h.b.Restart != nil {
		h.waitEffects(ctx, t, transactions/3, "a third of the effects before the restart")
		t.Logf("%s: restarting the broker", h.b.Name)
		h.b.Restart(t)
	} else {
		t.Logf("%s: no broker restart in this test (Broker.Restart is nil)", h.b.Name)
	}
}

type harness struct {
	b        Broker
	pool     *pgxpool.Pool
	producer *outboxpgx.Driver
	writer   *outbox.Writer[pgx.Tx]
	consumer *sql.DB
	inbox    *outbox.Inbox[*sql.Tx]
	// insertEffect inserts one effect (msg_id, account, amount) in the
	// consumer's dialect.
	insertEffect string
	// countOutbox counts the producer's outbox rows, or only those not SENT.
	countOutbox func(ctx context.Context, notSent bool) (int, error)
	// countLastError counts the producer's outbox rows whose last_error is
	// LIKE like.
	countLastError func(ctx context.Context, like string) (int, error)
	// countDead counts the producer's DEAD outbox rows.
	countDead func(ctx context.Context) (int, error)

	mu         sync.Mutex
	committed  map[string]bool
	rolledBack map[string]bool
	expected   map[string]transfer // what each committed transaction's effect must be
	sent       []outbox.Message    // delivered messages, for duplicates
	refusals   firstTimes          // messages the broker refused once (refusingPublisher)

	// cleaned is how many SENT rows an operator's cleanup deleted (chaos).
	cleaned int64

	deliveries atomic.Int64 // handler calls
	discarded  atomic.Int64 // deliveries the inbox recognised as duplicates
	failed     atomic.Int64 // injected handler failures, before the inbox
	fnFailed   atomic.Int64 // injected failures of the change, inside the inbox's transaction
	// commitFailed counts the consumer transactions failed at their commit,
	// after the inbox record and the change were written (faultyInbox).
	commitFailed atomic.Int64
}

func newHarness(ctx context.Context, t *testing.T, b Broker) *harness {
	t.Helper()
	h := newConsumerHarness(ctx, t, b)

	// Producer: PostgreSQL, in a schema of this test's own.
	admin, err := pgxpool.New(ctx, PostgresDSN())
	if err == nil {
		err = admin.Ping(ctx)
	}
	if err != nil {
		t.Fatalf("PostgreSQL at %s is required for the end-to-end tests: %v", PostgresDSN(), err)
	}
	t.Cleanup(admin.Close)
	schema := "e2e_" + strings.ToLower(b.Name) + "_" + randomHex(4)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	cfg, err := pgxpool.ParseConfig(PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 8
	if h.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.pool.Close)
	if h.producer, err = outboxpgx.New(h.pool, outbox.Tables{}); err != nil {
		t.Fatal(err)
	}
	if err := h.producer.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.pool.Exec(ctx, `CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO accounts SELECT 'acct-' || g, 1000000 FROM generate_series(0, 6) g`); err != nil {
		t.Fatal(err)
	}
	if h.writer, err = outbox.NewWriter(h.producer, outbox.WriterConfig{}); err != nil {
		t.Fatal(err)
	}
	h.countOutbox = func(ctx context.Context, notSent bool) (n int, err error) {
		err = h.pool.QueryRow(ctx, countOutboxSQL(notSent)).Scan(&n)
		return n, err
	}
	h.countLastError = func(ctx context.Context, like string) (n int, err error) {
		err = h.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE last_error LIKE $1`, like).Scan(&n)
		return n, err
	}
	h.countDead = func(ctx context.Context) (n int, err error) {
		err = h.pool.QueryRow(ctx, countDeadSQL).Scan(&n)
		return n, err
	}
	return h
}

// countDeadSQL counts the DEAD outbox rows.
const countDeadSQL = `SELECT count(*) FROM outbox WHERE status = 2`

// countOutboxSQL counts the outbox rows, or only those not SENT.
func countOutboxSQL(notSent bool) string {
	if notSent {
		return `SELECT count(*) FROM outbox WHERE status <> 1`
	}
	return `SELECT count(*) FROM outbox`
}

// newConsumerHarness opens the consumer's side only: a SQLite file of its
// own with the inbox and the effects table.
func newConsumerHarness(ctx context.Context, t *testing.T, b Broker) *harness {
	t.Helper()
	h := &harness{b: b, committed: map[string]bool{}, rolledBack: map[string]bool{}, expected: map[string]transfer{},
		insertEffect: `INSERT INTO effects (msg_id, account, amount) VALUES (?, ?, ?)`}
	var err error

	// Consumer: a SQLite file, its own database.
	if h.consumer, err = outboxsqlite.Open(filepath.Join(t.TempDir(), "consumer.db")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.consumer.Close() })
	cdrv, err := outboxsqlite.New(h.consumer, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cdrv.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// effects has no unique key on purpose: a second effect would show.
	if _, err := h.consumer.ExecContext(ctx, `CREATE TABLE effects (msg_id TEXT NOT NULL, account TEXT NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	// The inbox works through a driver that fails some transactions at
	// their commit, after the inbox record and the change were written.
	h.inbox = outbox.NewInbox[*sql.Tx](&faultyInbox{Driver: cdrv, h: h, pending: map[*sql.Tx]string{}})
	return h
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Faults are injected by message number (the digits after the last '-' of
// the msg_id), each on the message's first occasion only:
const (
	failHandlerAt = 0  // the handler fails before the inbox
	failChangeAt  = 13 // the change fails inside the inbox's transaction
	failCommitAt  = 17 // the inbox's transaction fails at its commit
	refuseAt      = 7  // the broker refuses relay 2's first attempt
)

func (h *harness) newRelay(t *testing.T, pub outbox.Publisher) *outbox.Relay {
	t.Helper()
	r, err := outbox.NewRelay(h.producer, pub, outbox.RelayConfig{
		BatchSize:      50,
		Interval:       50 * time.Millisecond,
		RetryBase:      100 * time.Millisecond,
		RetryMax:       time.Second,
		MaxRetries:     20,
		PublishTimeout: 5 * time.Second,
		PauseBase:      100 * time.Millisecond,
		PauseMax:       2 * time.Second,
		Logger:         slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// testWriter sends the relay's log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

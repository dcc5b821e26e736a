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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
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
	"github.com/outbox-go/outbox/outboxdriver"
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

	// The subscriber exists before anything is published, so that brokers
	// that keep nothing for absent consumers (MQTT) lose nothing.
	sub := b.NewSubscriber(t, group)
	t.Cleanup(func() { closeIfCloser(sub) })
	subCtx, stopSub := context.WithCancel(ctx)
	subDone := make(chan error, 1)
	go func() { subDone <- sub.Run(subCtx, h.handler()) }()

	// Producers commit business transactions while the relays run.
	var prodWG sync.WaitGroup
	for p := range producers {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			h.produce(ctx, t, p)
		}()
	}

	// Relay 1 publishes crashAfter batches, then "dies" after publishing the
	// next one and before marking it: its publisher reports the broker as
	// unavailable, so the rows stay NEW, and the relay stops.
	pub1 := b.NewPublisher(t)
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
	t.Logf("%s: relay 1 died after publishing batch %d unmarked (%d messages)", b.Name, crash.batches.Load(), crash.lost.Load())
	// The batch it died on was never marked: its rows must all still be NEW,
	// or relay 2 would not publish them again and the "crash" would prove
	// nothing (a relay that marks SENT what the publisher failed loses
	// messages whenever the failure was real).
	h.checkStillNew(ctx, t, crash.lostIDs)

	// Relay 2 takes over and publishes the unmarked batch again. Its broker
	// refuses the first attempt of some messages (refusingPublisher): each
	// must be retried, not marked SENT.
	pub2 := b.NewPublisher(t)
	defer closeIfCloser(pub2)
	refusing := &refusingPublisher{Publisher: pub2, h: h}
	relayCtx2, stopRelay2 := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- h.newRelay(t, refusing).Run(relayCtx2) }()

	// Duplicate deliveries: messages already applied are published again.
	h.waitEffects(ctx, t, duplicates*2, "first effects")
	h.publishDuplicates(ctx, t, pub2)

	// The broker restarts while producers, relay and subscriber run.
	if b.Restart != nil {
		h.waitEffects(ctx, t, transactions/3, "a third of the effects before the restart")
		t.Logf("%s: restarting the broker", b.Name)
		b.Restart(t)
	} else {
		t.Logf("%s: no broker restart in this test (Broker.Restart is nil)", b.Name)
	}

	prodWG.Wait()
	committed := h.committedIDs()
	h.waitEffects(ctx, t, len(committed), "every committed message's effect")
	h.waitOutboxDrained(ctx, t)
	// Let stray redeliveries arrive before counting.
	time.Sleep(time.Second)
	stopRelay2()
	if err := <-relayDone; err != nil {
		t.Errorf("relay 2: %v", err)
	}
	stopSub()
	select {
	case err := <-subDone:
		if err != nil {
			t.Errorf("subscriber: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("subscriber did not stop within 30s")
	}
	h.check(t, committed)
	t.Logf("%s: the broker refused %d messages once (relay 2)", b.Name, refusing.refused.Load())
	if refusing.refused.Load() == 0 {
		t.Errorf("%s: the broker refused no message, so the relay's retry path was not exercised", b.Name)
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

type transfer struct {
	Account string `json:"account"`
	Amount  int    `json:"amount"`
}

// produce runs this producer's share of the business transactions: each
// debits an account and writes its message in the same transaction; every
// tenth rolls back after writing.
func (h *harness) produce(ctx context.Context, t *testing.T, p int) {
	for i := p; i < transactions; i += producers {
		id := fmt.Sprintf("%s-tx-%04d", h.b.Name, i)
		acct := fmt.Sprintf("acct-%d", i%7)
		payload, _ := json.Marshal(transfer{Account: acct, Amount: i + 1})
		m := outbox.Message{MsgID: id, Topic: h.b.Topic, Key: acct, Payload: payload, Headers: map[string]string{"producer": fmt.Sprint(p)}}
		if err := h.record(id, transfer{Account: acct, Amount: i + 1}, h.transferTx(ctx, m, acct, i+1, i%10 == 9)); err != nil {
			t.Errorf("business transaction %s: %v", id, err)
			return
		}
		if i%50 == 0 {
			time.Sleep(20 * time.Millisecond) // spread the load over the run
		}
	}
}

var errRollback = errors.New("e2e: business rule says roll back")

// debitSQL is the business change of every PostgreSQL producer transaction.
const debitSQL = `UPDATE accounts SET balance = balance - $1 WHERE id = $2`

// transferTx runs one business transaction on the PostgreSQL producer: it
// debits acct by amount and writes m, then commits, or, when rollback,
// returns errRollback after writing. The commit does not follow ctx, so that
// no transaction is left in doubt when ctx ends. Half the transactions
// write m with Writer.Write (amount/2 odd: 2, 3, 6, 7, 10, 11, ...); the
// others go through WriteOnCommit, which sends the insert with the COMMIT.
// Each way gets rolled-back transactions (amounts 10, 30, ... and 20, 40, ...
// in the runs, where every tenth rolls back).
func (h *harness) transferTx(ctx context.Context, m outbox.Message, acct string, amount int, rollback bool) error {
	if (amount/2)%2 == 1 {
		return h.heldTransferTx(ctx, m, acct, amount, rollback, 0)
	}
	return h.producer.WriteOnCommit(context.WithoutCancel(ctx), h.writer, func(ctx context.Context, tx pgx.Tx) ([]outbox.Message, error) {
		if _, err := tx.Exec(ctx, debitSQL, amount, acct); err != nil {
			return nil, err
		}
		if rollback {
			return []outbox.Message{m}, errRollback
		}
		return []outbox.Message{m}, nil
	})
}

// heldTransferTx is transferTx, except that with hold > 0 it writes m first,
// so that the transaction holds its row's id before anything else, and
// stays open for hold (holding no row lock: the account is debited after)
// while rows with higher ids commit.
func (h *harness) heldTransferTx(ctx context.Context, m outbox.Message, acct string, amount int, rollback bool, hold time.Duration) error {
	return pgx.BeginFunc(context.WithoutCancel(ctx), h.pool, func(tx pgx.Tx) error {
		debit := func() error {
			_, err := tx.Exec(ctx, debitSQL, amount, acct)
			return err
		}
		if hold == 0 {
			if err := debit(); err != nil {
				return err
			}
		}
		if err := h.writer.Write(ctx, tx, m); err != nil {
			return err
		}
		if hold > 0 {
			time.Sleep(hold)
			if err := debit(); err != nil {
				return err
			}
		}
		if rollback {
			return errRollback
		}
		return nil
	})
}

// record notes how business transaction id, which wrote tr, ended: committed
// (err nil) or rolled back (errRollback); any other error is returned.
func (h *harness) record(id string, tr transfer, err error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		h.committed[id] = true
		h.expected[id] = tr
	case errors.Is(err, errRollback):
		h.rolledBack[id] = true
	default:
		return err
	}
	return nil
}

func (h *harness) committedIDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]string, 0, len(h.committed))
	for id := range h.committed {
		ids = append(ids, id)
	}
	return ids
}

// Faults are injected by message number (the digits after the last '-' of
// the msg_id), each on the message's first occasion only:
const (
	failHandlerAt = 0  // the handler fails before the inbox
	failChangeAt  = 13 // the change fails inside the inbox's transaction
	failCommitAt  = 17 // the inbox's transaction fails at its commit
	refuseAt      = 7  // the broker refuses relay 2's first attempt
)

// msgNumber returns the number at the end of a msg_id, or -1.
func msgNumber(msgID string) int {
	n, err := strconv.Atoi(msgID[strings.LastIndex(msgID, "-")+1:])
	if err != nil {
		return -1
	}
	return n
}

// handler applies a transfer through the inbox: the credit and the inbox
// record commit together. The first delivery of every 25th message fails
// before the inbox, so the broker's redelivery is part of every run; the
// change of another fails after its insert, inside the inbox's transaction,
// and the transaction of another fails at its commit (faultyInbox): the
// inbox must leave no record of either, so that the redelivery applies it.
// firstTimes decides which deliveries get an injected fault: the first
// delivery, or publish, of every 25th message from at.
type firstTimes struct {
	mu   sync.Mutex
	seen map[string]bool
}

// due reports whether msgID is due for the fault injected at every 25th
// message from at, and marks it done: it is due once.
func (f *firstTimes) due(msgID string, at int) bool {
	if msgNumber(msgID)%25 != at {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen[msgID] {
		return false
	}
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	f.seen[msgID] = true
	return true
}

func (h *harness) handler() outbox.Handler {
	var handlerFailed, changeFailed firstTimes
	return func(ctx context.Context, m outbox.Message) error {
		h.deliveries.Add(1)
		if handlerFailed.due(m.MsgID, failHandlerAt) {
			h.failed.Add(1)
			return errors.New("e2e: injected handler failure")
		}
		var tr transfer
		if err := json.Unmarshal(m.Payload, &tr); err != nil {
			return outbox.Permanent(err)
		}
		applied, err := h.inbox.Process(ctx, group, m.MsgID, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, h.insertEffect, m.MsgID, tr.Account, tr.Amount)
			if err == nil && changeFailed.due(m.MsgID, failChangeAt) {
				h.fnFailed.Add(1)
				return errors.New("e2e: injected failure of the change, after its insert")
			}
			return err
		})
		if err == nil && !applied {
			h.discarded.Add(1)
		}
		if err == nil && applied {
			h.mu.Lock()
			if len(h.sent) < duplicates {
				h.sent = append(h.sent, m)
			}
			h.mu.Unlock()
		}
		return err
	}
}

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

func (h *harness) publishDuplicates(ctx context.Context, t *testing.T, pub outbox.Publisher) {
	t.Helper()
	h.mu.Lock()
	dups := append([]outbox.Message(nil), h.sent...)
	h.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i, err := range pub.Publish(pctx, dups) {
		if err != nil {
			t.Fatalf("publishing duplicate %s: %v", dups[i].MsgID, err)
		}
	}
	t.Logf("%s: published %d delivered messages again", h.b.Name, len(dups))
}

// waitEffects waits until the consumer database holds at least n effects.
// It fails when the count has not grown for two minutes: a slow subscriber
// (MQTT's takes one message at a time) may need longer than that in all.
func (h *harness) waitEffects(ctx context.Context, t *testing.T, n int, what string) {
	t.Helper()
	if err := h.awaitEffects(ctx, n, what); err != nil {
		t.Fatal(err)
	}
}

// awaitEffects is waitEffects, returning the failure instead.
func (h *harness) awaitEffects(ctx context.Context, n int, what string) error {
	last, progress := -1, time.Now()
	for {
		var got int
		if err := h.consumer.QueryRowContext(ctx, `SELECT count(DISTINCT msg_id) FROM effects`).Scan(&got); err != nil {
			return fmt.Errorf("counting effects: %w", err)
		}
		if got >= n {
			return nil
		}
		if got > last {
			last, progress = got, time.Now()
		}
		if time.Since(progress) > 2*time.Minute {
			return fmt.Errorf("%s: waiting for %s: %d of %d effects, none new for 2 minutes (%d deliveries)", h.b.Name, what, got, n, h.deliveries.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitOutboxDrained waits until every outbox row is SENT. It fails when a
// row is DEAD (it will never be sent), or when the count of rows not SENT
// has not fallen for a minute: a relay may be waiting out a message's retry
// delay.
func (h *harness) waitOutboxDrained(ctx context.Context, t *testing.T) {
	t.Helper()
	last, progress := -1, time.Now()
	for {
		pending, err := h.countOutbox(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			return
		}
		dead, err := h.countDead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if dead > 0 {
			t.Fatalf("%s: %d outbox rows are DEAD (%d not SENT in all)", h.b.Name, dead, pending)
		}
		if pending < last || last < 0 {
			last, progress = pending, time.Now()
		}
		if time.Since(progress) > time.Minute {
			t.Fatalf("%s: %d outbox rows still not SENT, none sent for a minute", h.b.Name, pending)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// check compares the consumer's effects with the producer's commits and
// returns the committed messages without an effect.
func (h *harness) check(t *testing.T, committed []string) (lost []string) {
	t.Helper()
	ctx := context.Background()
	rows, err := h.consumer.QueryContext(ctx, `SELECT msg_id, account, amount FROM effects`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	effects := map[string]int{}
	var wrong []string
	h.mu.Lock()
	for rows.Next() {
		var id string
		var tr transfer
		if err := rows.Scan(&id, &tr.Account, &tr.Amount); err != nil {
			h.mu.Unlock()
			t.Fatal(err)
		}
		effects[id]++
		if want, ok := h.expected[id]; ok && tr != want {
			wrong = append(wrong, fmt.Sprintf("%s: %+v, want %+v", id, tr, want))
		}
	}
	h.mu.Unlock()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var doubled, phantom []string
	for _, id := range committed {
		switch n := effects[id]; {
		case n == 0:
			lost = append(lost, id)
		case n > 1:
			doubled = append(doubled, fmt.Sprintf("%s×%d", id, n))
		}
	}
	for id := range effects {
		if h.rolledBack[id] {
			phantom = append(phantom, id)
		} else if !h.committed[id] {
			phantom = append(phantom, id+" (never written)")
		}
	}
	rows2, err := h.countOutbox(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d committed, %d rolled back, %d outbox rows; %d deliveries, %d duplicates discarded by the inbox; injected failures: %d handler, %d change, %d commit",
		h.b.Name, len(committed), len(h.rolledBack), rows2, h.deliveries.Load(), h.discarded.Load(), h.failed.Load(), h.fnFailed.Load(), h.commitFailed.Load())
	t.Logf("%s: lost %d, duplicate effects %d, effects of rolled-back transactions %d", h.b.Name, len(lost), len(doubled), len(phantom))
	if len(lost)+len(doubled)+len(phantom) > 0 {
		t.Errorf("%s: lost %v; applied more than once %v; effects without a commit %v", h.b.Name, lost, doubled, phantom)
	}
	if len(wrong) > 0 {
		t.Errorf("%s: %d effects differ from the transfer their transaction wrote: %v", h.b.Name, len(wrong), wrong)
	}
	// Every kind of injected failure must have happened, or its check was
	// not made.
	for _, f := range []struct {
		what string
		n    int64
	}{{"handler", h.failed.Load()}, {"change", h.fnFailed.Load()}, {"commit", h.commitFailed.Load()}} {
		if f.n == 0 {
			t.Errorf("%s: no injected %s failure happened", h.b.Name, f.what)
		}
	}
	if int64(rows2)+h.cleaned != int64(len(committed)) {
		t.Errorf("%s: %d outbox rows (and %d deleted by cleanup) for %d committed transactions", h.b.Name, rows2, h.cleaned, len(committed))
	}
	// A broker that deduplicates by msg_id (JetStream, within its window)
	// drops the re-published copies before the subscriber sees them; its
	// test shortens the window so that the inbox is exercised all the same.
	if h.discarded.Load() == 0 {
		t.Errorf("%s: the inbox discarded no duplicate, so the duplicate deliveries did not happen", h.b.Name)
	}
	return lost
}

// crashingPublisher publishes through Publisher; after `after` batches it
// publishes one more batch for real, reports it as unavailable (the relay
// leaves the rows NEW, as if it had died before marking them) and stops the
// relay.
type crashingPublisher struct {
	outbox.Publisher
	after   int64
	crash   func()
	batches atomic.Int64
	lost    atomic.Int64
	crashed atomic.Bool
	lostIDs []string // the batch it died on; read after the relay stopped
}

func (c *crashingPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := c.Publisher.Publish(ctx, msgs)
	if c.batches.Add(1) <= c.after || c.crashed.Load() {
		return errs
	}
	for _, err := range errs {
		if err != nil {
			return errs // not a clean crash point; try the next batch
		}
	}
	c.crashed.Store(true)
	c.lost.Store(int64(len(msgs)))
	for _, m := range msgs {
		c.lostIDs = append(c.lostIDs, m.MsgID)
	}
	c.crash()
	out := make([]error, len(msgs))
	for i := range out {
		out[i] = outbox.Unavailable(errors.New("e2e: relay died between publish and mark"))
	}
	return out
}

func closeIfCloser(v any) {
	if c, ok := v.(io.Closer); ok {
		_ = c.Close()
	}
}

// checkStillNew fails the test unless every row of ids is NEW.
func (h *harness) checkStillNew(ctx context.Context, t *testing.T, ids []string) {
	t.Helper()
	var notNew int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE msg_id = ANY($1) AND status <> 0`, ids).Scan(&notNew); err != nil {
		t.Fatal(err)
	}
	if notNew > 0 {
		t.Fatalf("%s: %d of the %d rows of the batch relay 1 died on (its publisher failed them) are no longer NEW", h.b.Name, notNew, len(ids))
	}
}

// refusingPublisher publishes through Publisher, except that the broker
// refuses the first attempt of every 25th message from refuseAt (an error
// that is not Unavailable: the relay must spend a retry and try it again,
// not mark it SENT); it is not published. The later messages of its key in
// the batch are held back (ErrHeldBack), unpublished, as a real publisher
// does.
type refusingPublisher struct {
	outbox.Publisher
	h       *harness
	refused atomic.Int64
}

func (p *refusingPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	var pass []outbox.Message
	var at []int
	var failedKeys map[string]string
	for i, m := range msgs {
		if first, held := failedKeys[m.Key]; held && m.Key != "" {
			errs[i] = fmt.Errorf("%w (msg_id %q was refused first)", outbox.ErrHeldBack, first)
			continue
		}
		if p.h.refusals.due(m.MsgID, refuseAt) {
			p.refused.Add(1)
			errs[i] = errors.New("e2e: injected refusal by the broker")
			if failedKeys == nil {
				failedKeys = map[string]string{}
			}
			failedKeys[m.Key] = m.MsgID
			continue
		}
		pass = append(pass, m)
		at = append(at, i)
	}
	if len(pass) > 0 {
		for j, err := range p.Publisher.Publish(ctx, pass) {
			errs[at[j]] = err
		}
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// beforeCommitKey keys, in a handler's context, a function that the
// consumer's transaction calls after its inbox record and its change, just
// before its commit: the chaos run's crash of the subscriber waits there.
type beforeCommitKey struct{}

// faultyInbox is the consumer's driver, except that the transaction that
// records the first delivery of every 25th message from failCommitAt fails
// at its commit, after the inbox record and the change were written: both
// must be rolled back together, and the redelivery must apply the message.
type faultyInbox struct {
	outboxdriver.Driver[*sql.Tx]
	h       *harness
	mu      sync.Mutex
	pending map[*sql.Tx]string // transactions to fail at their commit
	done    map[string]bool
}

func (d *faultyInbox) MarkConsumedTx(ctx context.Context, tx *sql.Tx, group, msgID string) (bool, error) {
	fresh, err := d.Driver.MarkConsumedTx(ctx, tx, group, msgID)
	if err == nil && fresh && msgNumber(msgID)%25 == failCommitAt {
		d.mu.Lock()
		if !d.done[msgID] {
			d.pending[tx] = msgID
		}
		d.mu.Unlock()
	}
	return fresh, err
}

func (d *faultyInbox) RunInTx(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	return d.Driver.RunInTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		err := fn(ctx, tx)
		if hook, ok := ctx.Value(beforeCommitKey{}).(func()); ok && err == nil {
			hook()
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		id, ok := d.pending[tx]
		delete(d.pending, tx)
		if ok && err == nil && !d.done[id] {
			if d.done == nil {
				d.done = map[string]bool{}
			}
			d.done[id] = true
			d.h.commitFailed.Add(1)
			return errors.New("e2e: injected failure of the consumer's commit")
		}
		return err
	})
}

package outboxpgx_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/outboxdriver"
)

// horizonEnv is one schema with a writer, a relay whose publisher can be
// told to fail a message, and what it published.
type horizonEnv struct {
	t     *testing.T
	ctx   context.Context
	pool  *pgxpool.Pool
	d     *outboxpgx.Driver
	w     *outbox.Writer[pgx.Tx]
	relay *outbox.Relay

	mu   sync.Mutex
	seen map[string]int
	fail map[string][]error // msg_id -> the errors of its next publishes
}

func newHorizonEnv(t *testing.T) *horizonEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	pool, d := migratedPool(ctx, t, newSchema(t), 0)
	w, err := outbox.NewWriter(d, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e := &horizonEnv{t: t, ctx: ctx, pool: pool, d: d, w: w, seen: map[string]int{}, fail: map[string][]error{}}
	pub := outbox.BatchPublishFunc(func(_ context.Context, msgs []outbox.Message) []error {
		e.mu.Lock()
		defer e.mu.Unlock()
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			if f := e.fail[m.MsgID]; len(f) > 0 {
				errs[i], e.fail[m.MsgID] = f[0], f[1:]
				continue
			}
			e.seen[m.MsgID]++
		}
		return errs
	})
	e.relay, err = outbox.NewRelay(d, pub, outbox.RelayConfig{BatchSize: 100,
		RetryBase: 2 * time.Second, RetryMax: 2 * time.Second, MaxRetries: 2, RetryBudget: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// write commits n messages named prefix-0 ... in one transaction.
func (e *horizonEnv) write(prefix string, n int) {
	e.t.Helper()
	var msgs []outbox.Message
	for i := range n {
		msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("%s-%d", prefix, i), Topic: "t", Payload: json.RawMessage(`{}`)})
	}
	if err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error { return e.w.Write(e.ctx, tx, msgs...) }); err != nil {
		e.t.Fatal(err)
	}
}

// drain runs the relay's batches until one finds nothing due; every claim
// that starts from the first id sweeps the low-water mark first.
func (e *horizonEnv) drain() {
	e.t.Helper()
	for range 1000 {
		rep, err := e.relay.RunOnce(e.ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		if len(rep.Results) == 0 {
			if rep, err = e.relay.RunOnce(e.ctx); err != nil { // from the first id
				e.t.Fatal(err)
			} else if len(rep.Results) == 0 {
				return
			}
		}
	}
	e.t.Fatal("the relay never ran dry")
}

func (e *horizonEnv) lwm() int64 {
	e.t.Helper()
	var lwm int64
	if err := e.pool.QueryRow(e.ctx, `SELECT lwm FROM outbox_horizon`).Scan(&lwm); err != nil {
		e.t.Fatal(err)
	}
	return lwm
}

func (e *horizonEnv) id(msgID string) int64 {
	e.t.Helper()
	m, err := e.d.GetMessage(e.ctx, msgID)
	if err != nil {
		e.t.Fatal(err)
	}
	return m.ID
}

func (e *horizonEnv) published(msgID string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen[msgID]
}

// advance writes and relays rows until the low-water mark has passed id
// (each round lets the transactions of the sweep before end; other tests'
// transactions in the database hold the mark back too, for up to a few
// seconds).
func (e *horizonEnv) advancePast(id int64, round string) {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; i < 20 || time.Now().Before(deadline); i++ {
		e.write(fmt.Sprintf("%s-%d", round, i), 150)
		e.drain()
		if e.lwm() >= id {
			return
		}
		if i >= 20 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	e.t.Fatalf("the low-water mark %d never passed id %d", e.lwm(), id)
}

// TestLowWaterMarkHoldsForOpenTransactions: a transaction that took an id
// and has not committed holds the low-water mark below that id however many
// sweeps run meanwhile, whatever else commits and is relayed; once it
// commits, its row is relayed. Its first write is the outbox insert, so for a
// while it holds an id before it has a transaction id.
func TestLowWaterMarkHoldsForOpenTransactions(t *testing.T) {
	t.Parallel()
	e := newHorizonEnv(t)
	e.write("before", 10)
	e.drain()
	slow, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(e.ctx)
	if err := e.w.Write(e.ctx, slow, outbox.Message{MsgID: "slow", Topic: "t", Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	var slowID int64
	if err := slow.QueryRow(e.ctx, `SELECT id FROM outbox WHERE msg_id = 'slow'`).Scan(&slowID); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		e.write(fmt.Sprintf("fast%d", i), 150)
		e.drain()
	}
	if lwm := e.lwm(); lwm >= slowID {
		t.Fatalf("low-water mark %d passed the open transaction's id %d", lwm, slowID)
	}
	if e.id("fast9-149") <= slowID {
		t.Fatal("the test did not commit rows past the open transaction's id")
	}
	if err := slow.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.drain()
	if n := e.published("slow"); n != 1 {
		t.Fatalf("the late row was published %d times, want 1", n)
	}
	e.advancePast(e.id("fast9-149"), "after")
}

// TestRequeuedRowsBelowTheMark: a row that failed (retry), was released
// (broker unavailable) or was made DEAD and then retried by an operator is
// found below the low-water mark, through the requeued index.
func TestRequeuedRowsBelowTheMark(t *testing.T) {
	t.Parallel()
	e := newHorizonEnv(t)
	refused := errors.New("refused")
	e.mu.Lock()
	e.fail["retry-0"] = []error{refused}
	e.fail["release-0"] = []error{outbox.Unavailable(errors.New("broker down"))}
	e.fail["dead-0"] = []error{refused, refused} // MaxRetries 2
	e.mu.Unlock()
	e.write("retry", 1)
	e.write("release", 1)
	e.write("dead", 1)
	start := time.Now()
	e.drain()
	e.advancePast(e.id("dead-0"), "pass")
	if time.Since(start) >= time.Second || e.published("retry-0") != 0 {
		t.Fatalf("the mark passed the retries only after %s (they come due after 1-2s); retry-0 published %d times",
			time.Since(start), e.published("retry-0"))
	}
	time.Sleep(2100*time.Millisecond - time.Since(start)) // both retries come due
	e.drain()
	if n := e.published("retry-0"); n != 1 {
		t.Fatalf("the retried row below the mark was published %d times, want 1", n)
	}
	if n := e.published("release-0"); n != 1 {
		t.Fatalf("the released row was published %d times, want 1", n)
	}
	m, err := e.d.GetMessage(e.ctx, "dead-0")
	if err != nil || m.Status != outbox.StatusDead {
		t.Fatalf("dead-0: %+v, %v", m, err)
	}
	// DEAD records when (dead_at: its second attempt, after the first
	// retry's backoff of at least a second) and leaves the requeued
	// index, where every rescan would walk over it (schema version 4).
	if !m.DeadAt.After(m.CreatedAt.Add(time.Second)) || !m.NextRetryAt.Equal(m.CreatedAt) {
		t.Fatalf("the DEAD row: dead_at %s, next_retry_at %s, created_at %s; want dead_at after the retry and next_retry_at = created_at",
			m.DeadAt, m.NextRetryAt, m.CreatedAt)
	}
	if lwm := e.lwm(); lwm < m.ID {
		t.Fatalf("the mark %d is below the DEAD row %d", lwm, m.ID)
	}
	if n, err := e.d.RetryDead(e.ctx, outbox.DeadFilter{MsgIDs: []string{"dead-0"}}, "test"); err != nil || n != 1 {
		t.Fatalf("retry dead: %d, %v", n, err)
	}
	if m, err := e.d.GetMessage(e.ctx, "dead-0"); err != nil || m.Status != outbox.StatusNew || !m.DeadAt.IsZero() {
		t.Fatalf("dead-0 after the operator's retry: %+v, %v; want NEW with no dead_at", m, err)
	}
	e.drain()
	if n := e.published("dead-0"); n != 1 {
		t.Fatalf("the operator's retry below the mark was published %d times, want 1", n)
	}
	var requeued int64
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM outbox WHERE next_retry_at > created_at`).Scan(&requeued); err != nil {
		t.Fatal(err)
	}
	if requeued != 0 {
		t.Fatalf("%d SENT rows are still in the requeued index", requeued)
	}
}

// TestLowWaterMarkStopsAtClaimedRows: rows another relay has claimed but not
// marked count as pending, so when that relay dies and its lease runs out,
// they are above the mark and found again.
func TestLowWaterMarkStopsAtClaimedRows(t *testing.T) {
	t.Parallel()
	e := newHorizonEnv(t)
	e.write("held", 50)
	start := time.Now()
	const lease = time.Second
	claim, err := e.d.Claim(e.ctx, outboxdriver.ClaimParams{Limit: 50, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if len(claim.Messages()) != 50 {
		t.Fatalf("claimed %d of 50", len(claim.Messages()))
	}
	heldID := claim.Messages()[0].ID
	for i := range 5 {
		e.write(fmt.Sprintf("other%d", i), 150)
		e.drain()
	}
	if lwm := e.lwm(); lwm >= heldID {
		t.Fatalf("low-water mark %d passed rows claimed from id %d", lwm, heldID)
	}
	// The relay that holds them dies: its lease runs out.
	time.Sleep(time.Until(start.Add(lease + 100*time.Millisecond)))
	e.drain()
	for i := range 50 {
		if n := e.published(fmt.Sprintf("held-%d", i)); n != 1 {
			t.Fatalf("held-%d published %d times after the lease ran out, want 1", i, n)
		}
	}
}

// TestSequenceCacheRefused: the low-water mark needs ids taken in order, which
// a cached identity sequence breaks (each backend hands out its own block). A
// relay on such a table refuses to rescan, and says how to fix it.
func TestSequenceCacheRefused(t *testing.T) {
	t.Parallel()
	e := newHorizonEnv(t)
	e.write("m", 1)
	if _, err := e.pool.Exec(e.ctx, `ALTER TABLE outbox ALTER COLUMN id SET CACHE 20`); err != nil {
		t.Fatal(err)
	}
	_, err := e.d.Claim(e.ctx, outboxdriver.ClaimParams{Limit: 10, Lease: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "CACHE 20") || !strings.Contains(err.Error(), "SET CACHE 1") {
		t.Fatalf("claim with a cached id sequence: %v", err)
	}
	if _, err := e.pool.Exec(e.ctx, `ALTER TABLE outbox ALTER COLUMN id SET CACHE 1`); err != nil {
		t.Fatal(err)
	}
	e.drain()
	if n := e.published("m-0"); n != 1 {
		t.Fatalf("published %d times after the fix, want 1", n)
	}
}

// TestLowWaterMarkAfterIdentityRestart: when the ids start again from 1
// (TRUNCATE ... RESTART IDENTITY, or ALTER TABLE ... ALTER COLUMN id
// RESTART), the mark starts again from 0, even when the new ids have already
// passed the old mark by the time a relay next sweeps: no row is left below
// it.
func TestLowWaterMarkAfterIdentityRestart(t *testing.T) {
	t.Parallel()
	for _, restart := range []string{
		`TRUNCATE outbox RESTART IDENTITY`,
		`DELETE FROM outbox; ALTER TABLE outbox ALTER COLUMN id RESTART`,
	} {
		t.Run(strings.Fields(restart)[0], func(t *testing.T) {
			t.Parallel()
			e := newHorizonEnv(t)
			e.write("old", 100)
			e.drain()
			e.advancePast(e.id("old-99"), "old-round")
			mark := e.lwm()
			if _, err := e.pool.Exec(e.ctx, restart); err != nil {
				t.Fatal(err)
			}
			// More rows than the old mark, all written before the relay
			// sweeps again: the highest id is not below the mark.
			n := int(mark) + 50
			e.write("new", n)
			if id := e.id("new-0"); id != 1 {
				t.Fatalf("the first id after %q is %d, want 1", restart, id)
			}
			e.drain()
			for i := range n {
				if got := e.published(fmt.Sprintf("new-%d", i)); got != 1 {
					t.Fatalf("new-%d (id %d, old mark %d) published %d times, want 1", i, i+1, mark, got)
				}
			}
		})
	}
}

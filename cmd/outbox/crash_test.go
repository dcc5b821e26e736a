package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
)

// The crash tests of DESIGN §1: the relay process is SIGKILLed after the
// endpoint has applied a message but before the relay has the ack, so that its
// batch is never marked. Nothing may be lost, the consumer's inbox must apply
// every message once, and no message may be charged a retry for the crash.

const consumerGroup = "crash-test"

// crashMsgID is the msg_id of message i. The space, the percent sign and the
// non-ASCII letter are percent-encoded in ce-id, which the endpoint decodes.
func crashMsgID(i int) string { return fmt.Sprintf("order %03d:paid 100%% ü", i) }

// consumer is a webhook endpoint that applies every delivery through an inbox
// on a database of its own (a SQLite file), as a real consumer would: a
// business row in effects(msg_id) and the inbox record in one transaction. It
// counts every delivery per msg_id.
type consumer struct {
	t     *testing.T
	db    *sql.DB
	inbox *outbox.Inbox[*sql.Tx]
	srv   *httptest.Server
	// payloads maps each msg_id the test wrote to its payload's "n"; a
	// delivery of any other msg_id, or with another body, is an error.
	payloads map[string]int
	// afterApply, when set, runs after a delivery was applied (or found to
	// be a duplicate) and before it is answered; n counts every delivery so
	// far, this one included.
	afterApply func(n int, msgID string)

	mu         sync.Mutex
	total      int
	deliveries map[string]int
	applied    map[string]int
}

func newConsumer(t *testing.T, payloads map[string]int, afterApply func(n int, msgID string)) *consumer {
	t.Helper()
	ctx := context.Background()
	db, err := outboxsqlite.Open(filepath.Join(t.TempDir(), "consumer.db"))
	if err != nil {
		t.Fatalf("consumer database: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	drv, err := outboxsqlite.New(db, outbox.Tables{})
	if err != nil {
		t.Fatalf("consumer driver: %v", err)
	}
	if err := drv.Migrate(ctx); err != nil {
		t.Fatalf("consumer migrate: %v", err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE effects (msg_id TEXT)"); err != nil {
		t.Fatalf("consumer business table: %v", err)
	}
	c := &consumer{t: t, db: db, inbox: outbox.NewInbox[*sql.Tx](drv), payloads: payloads, afterApply: afterApply,
		deliveries: map[string]int{}, applied: map[string]int{}}
	c.srv = httptest.NewServer(c)
	// Registered after the database's Close, so it runs before it: Close
	// waits for the handlers in flight.
	t.Cleanup(c.srv.Close)
	return c
}

func (c *consumer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw := r.Header.Get("Ce-Id")
	msgID, err := url.PathUnescape(raw)
	if err != nil || msgID == "" {
		c.t.Errorf("delivery with ce-id %q: %v", raw, err)
		http.Error(w, "bad ce-id", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		// The relay died while it was sending: no delivery, and nobody to
		// answer.
		return
	}
	if key := r.Header.Get("Idempotency-Key"); key != raw {
		c.t.Errorf("msg_id %q: Idempotency-Key %q differs from ce-id %q", msgID, key, raw)
	}
	var p struct{ N int }
	if n, ok := c.payloads[msgID]; !ok {
		c.t.Errorf("delivery of msg_id %q, which the test never committed", msgID)
	} else if err := json.Unmarshal(body, &p); err != nil || p.N != n {
		c.t.Errorf("msg_id %q: body %q, want n=%d", msgID, body, n)
	}
	c.mu.Lock()
	c.total++
	n := c.total
	c.deliveries[msgID]++
	c.mu.Unlock()

	// The relay may die while this runs; the consumer finishes its
	// transaction regardless, as a real one would.
	ctx := context.WithoutCancel(r.Context())
	applied, err := c.inbox.Process(ctx, consumerGroup, msgID, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO effects (msg_id) VALUES (?)", msgID)
		return err
	})
	if err != nil {
		c.t.Errorf("inbox: process %q: %v", msgID, err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if applied {
		c.mu.Lock()
		c.applied[msgID]++
		c.mu.Unlock()
	}
	if c.afterApply != nil {
		c.afterApply(n, msgID)
	}
	w.WriteHeader(http.StatusOK)
}

// counts returns copies of the per-msg_id delivery and apply counts and the
// total number of deliveries.
func (c *consumer) counts() (deliveries, applied map[string]int, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	deliveries, applied = make(map[string]int, len(c.deliveries)), make(map[string]int, len(c.applied))
	for k, v := range c.deliveries {
		deliveries[k] = v
	}
	for k, v := range c.applied {
		applied[k] = v
	}
	return deliveries, applied, c.total
}

// checkEffects fails the test unless the consumer's business table and inbox
// hold exactly one row per msg_id in want.
func (c *consumer) checkEffects(t *testing.T, want map[string]int) {
	t.Helper()
	for _, table := range []string{"effects", "consumed_msg"} {
		rows, err := c.db.Query("SELECT msg_id, count(*) FROM " + table + " GROUP BY msg_id")
		if err != nil {
			t.Fatalf("consumer: read %s: %v", table, err)
		}
		got := map[string]int{}
		for rows.Next() {
			var id string
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				t.Fatalf("consumer: read %s: %v", table, err)
			}
			got[id] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("consumer: read %s: %v", table, err)
		}
		rows.Close()
		for id, n := range got {
			switch _, ok := want[id]; {
			case !ok:
				t.Errorf("consumer %s holds %d rows for msg_id %q, which the test never committed", table, n, id)
			case n != 1:
				t.Errorf("consumer %s holds %d rows for msg_id %q, want 1 (effect once)", table, n, id)
			}
		}
		for id := range want {
			if got[id] == 0 {
				t.Errorf("consumer %s holds no row for msg_id %q", table, id)
			}
		}
	}
}

// killableRelay is one run of "outbox relay" that the test may SIGKILL.
type killableRelay struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	exited chan struct{} // closed once the process has ended
	err    error         // cmd.Wait's result, set before exited is closed
	killed atomic.Bool   // set before the test's SIGKILL
}

func startKillableRelay(t *testing.T, args ...string) *killableRelay {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	r := &killableRelay{stderr: &lockedBuffer{}, exited: make(chan struct{})}
	r.cmd = cliCommand(ctx, nil, append([]string{"relay"}, args...)...)
	r.cmd.Stdout, r.cmd.Stderr = r.stderr, r.stderr
	if err := r.cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start relay: %v", err)
	}
	go func() {
		r.err = r.cmd.Wait()
		cancel()
		close(r.exited)
	}()
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-r.exited
	})
	return r
}

// kill SIGKILLs the relay and waits until it is gone, so that nothing it
// might still do can race with what the caller does next.
func (r *killableRelay) kill() error {
	r.killed.Store(true)
	if err := r.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("SIGKILL: %v", err)
	}
	select {
	case <-r.exited:
	case <-time.After(30 * time.Second):
		return errors.New("the relay was still there 30s after SIGKILL")
	}
	ws, ok := r.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return fmt.Errorf("the relay ended with %v, not by SIGKILL\n%s", r.err, r.stderr)
	}
	return nil
}

// TestCrashRelayKilledBetweenPublishAndMark SIGKILLs the relay process twice
// in the middle of a batch, each time after the endpoint applied a message and
// before it answered, then lets a third relay finish the work.
func TestCrashRelayKilledBetweenPublishAndMark(t *testing.T) {
	t.Parallel()
	const messages = 200
	// The deliveries (counted over all runs) at which the relay is killed:
	// the 75th falls in the middle of the first run's second batch of 50,
	// the 160th in the middle of a batch of the second run.
	killAt := []int{75, 160}

	eachBackend(t, true, func(t *testing.T, b *backend) {
		start := time.Now()
		payloads := make(map[string]int, messages)
		for i := 1; i <= messages; i++ {
			id := crashMsgID(i)
			payloads[id] = i
			b.insert(t, id, "order.paid", fmt.Sprintf(`{"n":%d}`, i))
		}

		var (
			mu      sync.Mutex
			current *killableRelay
		)
		type kill struct {
			n     int
			msgID string
			err   error
		}
		kills := make(chan kill, len(killAt))
		c := newConsumer(t, payloads, func(n int, msgID string) {
			for _, k := range killAt {
				if n != k {
					continue
				}
				mu.Lock()
				r := current
				mu.Unlock()
				if r == nil {
					kills <- kill{n, msgID, errors.New("no relay was running")}
					return
				}
				// Killed before this delivery is answered: the relay never
				// gets the ack, so it never marks the batch.
				kills <- kill{n, msgID, r.kill()}
			}
		})

		// The lease that hides a claimed batch from other relays is twice
		// the publish timeout: it bounds how long the batch of a killed
		// relay waits before it is claimed again.
		publishTimeout := "4s"
		args := []string{"--db", b.dsn, "--broker", c.srv.URL + "/events", "--batch", "50",
			"--interval", "50ms", "--publish-timeout", publishTimeout, "--log-level", "debug"}

		var killedIDs []string
		for run, k := range killAt {
			r := startKillableRelay(t, args...)
			mu.Lock()
			current = r
			mu.Unlock()
			var got kill
			select {
			case got = <-kills:
			case <-r.exited:
				if !r.killed.Load() {
					t.Fatalf("relay run %d ended on its own before delivery %d: %v\n%s", run+1, k, r.err, r.stderr)
				}
				got = <-kills
			case <-time.After(60 * time.Second):
				_, _, total := c.counts()
				t.Fatalf("relay run %d: delivery %d did not come within 60s (%d so far)\n%s", run+1, k, total, r.stderr)
			}
			if got.err != nil {
				t.Fatalf("relay run %d: kill at delivery %d: %v", run+1, got.n, got.err)
			}
			mu.Lock()
			current = nil
			mu.Unlock()
			killedIDs = append(killedIDs, got.msgID)
			if n := b.count(t, "status = 1"); n >= messages {
				t.Fatalf("after kill %d all %d rows are SENT already: the killed batch was marked", run+1, n)
			}
		}

		// A last relay finishes the work and stops cleanly.
		stop := startRelay(t, nil, args...)
		waitFor(t, "no NEW row left", 60*time.Second, func() bool { return b.count(t, "status = 0") == 0 })
		res := stop()
		if res.code != 0 {
			t.Fatalf("final relay after SIGTERM: %s", res)
		}

		// The outbox: every row SENT, and the kills cost no retries.
		if n := b.count(t, "status = 1 AND sent_at IS NOT NULL"); n != messages {
			t.Errorf("%d rows are SENT with a sent_at, want %d", n, messages)
		}
		if n := b.count(t, "retries > 0 OR last_error IS NOT NULL"); n != 0 {
			t.Errorf("%d rows were charged a retry or an error for a crash, want 0", n)
		}

		// The consumer: everything delivered, the killed batches delivered
		// again, every effect applied once.
		deliveries, applied, total := c.counts()
		var dups []string
		for id := range payloads {
			if deliveries[id] == 0 {
				t.Errorf("msg_id %q was never delivered", id)
			}
			if deliveries[id] > 1 {
				dups = append(dups, id)
			}
			if applied[id] != 1 {
				t.Errorf("msg_id %q was applied %d times by the inbox, want 1", id, applied[id])
			}
		}
		for _, id := range killedIDs {
			// Applied, never acked: it must have come again.
			if deliveries[id] < 2 {
				t.Errorf("msg_id %q, delivered when the relay was killed, was delivered %d times; the killed batch was not published again",
					id, deliveries[id])
			}
		}
		if len(dups) == 0 || total <= messages {
			t.Errorf("%d deliveries of %d messages and none twice: the crash was not tested", total, messages)
		}
		c.checkEffects(t, payloads)
		sort.Strings(dups)
		t.Logf("%s: %d deliveries of %d messages, %d msg_ids delivered more than once, killed at deliveries %v (msg_ids %q), %s",
			b.name, total, messages, len(dups), killAt, killedIDs, time.Since(start).Round(time.Millisecond))
		if t.Failed() {
			t.Logf("final relay log:\n%s", res.stderr)
		}
	})
}

// TestCrashRolledBackTransactionPublishesNothing writes messages with the
// Writer in transactions that roll back, one of them open while the relay
// publishes committed messages around it: only the committed ones arrive.
func TestCrashRolledBackTransactionPublishesNothing(t *testing.T) {
	t.Parallel()
	b := newPostgres(t)
	mustRun(t, "migrate", "--db", b.dsn)
	ctx := context.Background()
	drv, err := outboxpgx.NewStdlib(b.db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter[*sql.Tx](drv, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	payloads := map[string]int{}
	write := func(tx *sql.Tx, prefix string, from, to int, commit bool) {
		t.Helper()
		var msgs []outbox.Message
		for i := from; i <= to; i++ {
			id := fmt.Sprintf("%s-%d", prefix, i)
			msgs = append(msgs, outbox.Message{MsgID: id, Topic: "order.paid", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
			if commit {
				payloads[id] = i
			}
		}
		if err := w.Write(ctx, tx, msgs...); err != nil {
			t.Fatalf("write %s-%d..%d: %v", prefix, from, to, err)
		}
	}
	begin := func() *sql.Tx {
		t.Helper()
		tx, err := b.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}

	// Rolled back later, after the relay has published around it.
	open := begin()
	write(open, "rolled-back", 1, 5, false)
	committed := begin()
	write(committed, "committed", 1, 5, true)
	if err := committed.Commit(); err != nil {
		t.Fatal(err)
	}
	// Rolled back at once.
	quick := begin()
	write(quick, "rolled-back", 6, 10, false)
	if err := quick.Rollback(); err != nil {
		t.Fatal(err)
	}

	c := newConsumer(t, payloads, nil)
	stop := startRelay(t, nil, "--db", b.dsn, "--broker", c.srv.URL+"/events", "--batch", "3", "--interval", "50ms")
	waitFor(t, "committed-1..5 SENT", 60*time.Second, func() bool { return b.count(t, "status = 1") == 5 })
	if err := open.Rollback(); err != nil {
		t.Fatal(err)
	}
	// Committed after the rollbacks, so with higher ids: once they are SENT
	// the relay has looked past every rolled-back id.
	later := begin()
	write(later, "committed", 6, 10, true)
	if err := later.Commit(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "committed-6..10 SENT", 60*time.Second, func() bool { return b.count(t, "status = 1") == 10 })
	res := stop()
	if res.code != 0 {
		t.Fatalf("relay after SIGTERM: %s", res)
	}

	if n := b.count(t, "msg_id LIKE 'rolled-back-%'"); n != 0 {
		t.Errorf("the outbox holds %d rows of rolled-back transactions", n)
	}
	if n := b.count(t, "1 = 1"); n != 10 {
		t.Errorf("the outbox holds %d rows, want 10", n)
	}
	deliveries, _, _ := c.counts()
	var got []string
	for id := range deliveries {
		got = append(got, id)
		if strings.HasPrefix(id, "rolled-back-") {
			t.Errorf("%q of a rolled-back transaction was published", id)
		}
	}
	for id := range payloads {
		if deliveries[id] == 0 {
			t.Errorf("committed %q was not published", id)
		}
	}
	if t.Failed() {
		sort.Strings(got)
		t.Logf("delivered: %q\nrelay log:\n%s", got, res.stderr)
	}
	c.checkEffects(t, payloads)
}

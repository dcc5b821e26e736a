package outboxmysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
)

// streamed collects what a Stream hands to fn, one call per batch.
type streamed struct {
	mu      sync.Mutex
	batches [][]outbox.Message
	more    chan struct{}
	// fail, when set, is fn's error for the batch that holds that msg_id.
	fail string
}

func (s *streamed) fn(_ context.Context, msgs []outbox.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		if m.MsgID == s.fail {
			return fmt.Errorf("refused %s", m.MsgID)
		}
	}
	s.batches = append(s.batches, msgs)
	select {
	case s.more <- struct{}{}:
	default:
	}
	return nil
}

// ids returns the msg_ids seen so far, in order.
func (s *streamed) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, b := range s.batches {
		for _, m := range b {
			ids = append(ids, m.MsgID)
		}
	}
	return ids
}

// sameBatch reports whether msg_ids a and b came in one call of fn.
func (s *streamed) sameBatch(a, b string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, bt := range s.batches {
		var hasA, hasB bool
		for _, m := range bt {
			hasA = hasA || m.MsgID == a
			hasB = hasB || m.MsgID == b
		}
		if hasA || hasB {
			return hasA && hasB
		}
	}
	return false
}

// running is a Stream running in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// runStream runs bd.StreamFrom(from) until it ends or stop is called.
func runStream(t *testing.T, bd *outboxmysql.BinlogDriver, from outboxmysql.BinlogPosition, s *streamed) *running {
	t.Helper()
	s.more = make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); r.err = bd.StreamFrom(ctx, from, s.fn) }()
	t.Cleanup(func() { r.stop() })
	return r
}

// stop ends the Stream and returns its error.
func (r *running) stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// ended waits for the Stream to end on its own and returns its error.
func (r *running) ended(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(within):
		t.Fatalf("the Stream did not end within %s", within)
		return nil
	}
}

// waitFor waits until the stream has handed over the msg_id last.
func (s *streamed) waitFor(t *testing.T, last string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		for _, id := range s.ids() {
			if id == last {
				return
			}
		}
		select {
		case <-s.more:
		case <-deadline:
			t.Fatalf("%s not streamed within %s; got %v", last, within, s.ids())
		}
	}
}

// insert commits one transaction of plain SQL inserts into the outbox.
func insert(t *testing.T, db *sql.DB, ids ...string) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		insertTx(t, tx, id)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func insertTx(t *testing.T, tx *sql.Tx, id string) {
	t.Helper()
	if _, err := tx.Exec("INSERT INTO outbox (msg_id, topic, msg_key, payload, headers) VALUES (?, 'binlog.test', ?, ?, ?)",
		id, "k-"+id, `{"id": "`+id+`"}`, `{"origin": "sql"}`); err != nil {
		t.Fatal(err)
	}
}

func waitStarted(t *testing.T, bd *outboxmysql.BinlogDriver) outboxmysql.BinlogPosition {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if p := bd.Confirmed(); !p.IsZero() {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream did not start within 20s")
		}
	}
}

func equal(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// Two interleaved transactions arrive in commit order, each whole, the
// second's rows before the first's although their ids are larger; a
// transaction rolled back never appears; the messages carry every column
// the insert wrote, as the table holds them.
func TestBinlogStreamCommitOrder(t *testing.T) {
	e := newBinlogEnv(t)
	s := &streamed{}
	stop := runStream(t, e.bd, outboxmysql.BinlogPosition{}, s)
	waitStarted(t, e.bd)

	tx1, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	insertTx(t, tx1, "a1")
	tx2, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	insertTx(t, tx2, "b1")
	rolled, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	insertTx(t, rolled, "r1")
	insertTx(t, tx1, "a2")
	if err := tx2.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := rolled.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	// The Writer's insert, in a transaction of its own.
	w, err := outbox.NewWriter(e.drv, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.drv.RunInTx(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
		return w.Write(ctx, tx, outbox.Message{MsgID: "w1", Topic: "binlog.writer", Payload: []byte(`{"w":1}`), Headers: map[string]string{"h": "v"}})
	}); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "w1", 20*time.Second)
	if err := stop.stop(); err != nil {
		t.Fatalf("Stream ended with %v", err)
	}
	if got, want := s.ids(), []string{"b1", "a1", "a2", "w1"}; !equal(got, want) {
		t.Fatalf("streamed %v, want %v (commit order, no rolled-back row)", got, want)
	}
	if !s.sameBatch("a1", "a2") {
		t.Fatal("the rows of one transaction were split between calls of fn")
	}
	for _, b := range s.batches {
		for _, m := range b {
			stored, err := e.drv.GetMessage(context.Background(), m.MsgID)
			if err != nil {
				t.Fatal(err)
			}
			sameMessage(t, m, stored)
		}
	}
}

// sameMessage compares a streamed message with the row GetMessage reads.
func sameMessage(t *testing.T, got, want outbox.Message) {
	t.Helper()
	if got.ID != want.ID || got.MsgID != want.MsgID || got.Topic != want.Topic || got.Key != want.Key ||
		string(got.Payload) != string(want.Payload) || fmt.Sprint(got.Headers) != fmt.Sprint(want.Headers) ||
		got.Status != want.Status || got.Retries != want.Retries ||
		!got.CreatedAt.Equal(want.CreatedAt) || !got.NextRetryAt.Equal(want.NextRetryAt) ||
		!got.SentAt.Equal(want.SentAt) || got.LastError != want.LastError || got.CreatedAt.IsZero() {
		t.Fatalf("streamed %+v\nthe table holds %+v", got, want)
	}
}

// A Stream whose fn fails ends with that error and confirms nothing from
// that batch on; a reader started again at the confirmed position, by the
// same driver or another one, gets that batch and everything after it,
// written while no reader ran, and nothing before it.
func TestBinlogRestartAtConfirmed(t *testing.T) {
	e := newBinlogEnv(t)
	s := &streamed{fail: "x2"}
	stop := runStream(t, e.bd, outboxmysql.BinlogPosition{}, s)
	waitStarted(t, e.bd)
	insert(t, e.db, "x1")
	s.waitFor(t, "x1", 20*time.Second)
	confirmed := e.bd.Confirmed()
	insert(t, e.db, "x2")
	if err := stop.ended(t, 20*time.Second); err == nil || !strings.Contains(err.Error(), "refused x2") {
		t.Fatalf("Stream ended with %v, want fn's error", err)
	}
	if got := e.bd.Confirmed(); got != confirmed {
		t.Fatalf("confirmed %s after fn failed, want %s (the position before the failed batch)", got, confirmed)
	}
	insert(t, e.db, "x3", "x4")

	// Another driver, as a new process would have, from the position kept.
	other := e.binlog(t, e.cfg)
	s2 := &streamed{}
	stop2 := runStream(t, other, confirmed, s2)
	s2.waitFor(t, "x4", 20*time.Second)
	if err := stop2.stop(); err != nil {
		t.Fatal(err)
	}
	if got, want := s2.ids(), []string{"x2", "x3", "x4"}; !equal(got, want) {
		t.Fatalf("restarted at %s: streamed %v, want %v", confirmed, got, want)
	}
	// The same driver: Stream resumes where its last Stream confirmed.
	s3 := &streamed{}
	stop3 := runStream(t, e.bd, outboxmysql.BinlogPosition{}, s3)
	s3.waitFor(t, "x4", 20*time.Second)
	if err := stop3.stop(); err != nil {
		t.Fatal(err)
	}
	if got, want := s3.ids(), []string{"x2", "x3", "x4"}; !equal(got, want) {
		t.Fatalf("Stream again: streamed %v, want %v", got, want)
	}
}

package outboxmysql_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
	"github.com/outbox-go/outbox/outboxdriver"
)

// sent records which relay published which msg_id, in publish order.
type sent struct {
	mu   sync.Mutex
	log  []string // relay/msg_id
	more chan struct{}
}

type sentBy struct {
	s    *sent
	name string
}

func (p sentBy) Publish(_ context.Context, msgs []outbox.Message) []error {
	p.s.mu.Lock()
	for _, m := range msgs {
		p.s.log = append(p.s.log, p.name+"/"+m.MsgID)
	}
	p.s.mu.Unlock()
	select {
	case p.s.more <- struct{}{}:
	default:
	}
	return nil
}

func (s *sent) entries() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

// waitFor waits until entry (relay/msg_id) was published.
func (s *sent) waitFor(t *testing.T, entry string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		for _, e := range s.entries() {
			if e == entry {
				return
			}
		}
		select {
		case <-s.more:
		case <-deadline:
			t.Fatalf("%s not published within %s; published %v", entry, within, s.entries())
		}
	}
}

// runCDCRelay runs a CDC relay named name on bd until stop is called.
// Its sweep waits an hour: what it publishes comes from the stream.
func runCDCRelay(t *testing.T, bd *outboxmysql.BinlogDriver, s *sent, name string) (stop func()) {
	t.Helper()
	r, err := outbox.NewRelay(bd, sentBy{s, name}, outbox.RelayConfig{CDC: true, NoWatch: true, Interval: time.Hour, SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// waitStreaming waits until a Stream of bd streams.
func waitStreaming(t *testing.T, bd *outboxmysql.BinlogDriver, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := bd.StreamLag(); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stream within %s", within)
		}
	}
}

// interleaved commits first+"2" (its own transaction) inside a transaction
// that inserts first+"1" before and first+"3" after it, then first+"4":
// commit order 2, 1, 3, 4, which is not id order.
func interleaved(t *testing.T, e *binlogEnv, first string) []string {
	t.Helper()
	tx, err := e.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	insertTx(t, tx, first+"1")
	insert(t, e.db, first+"2")
	insertTx(t, tx, first+"3")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	insert(t, e.db, first+"4")
	return []string{first + "2", first + "1", first + "3", first + "4"}
}

// waitCaughtUp waits until bd's stream reports no lag.
func waitCaughtUp(t *testing.T, bd *outboxmysql.BinlogDriver) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lag, ok := bd.StreamLag()
		if ok && lag.Bytes == 0 && lag.Behind == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("StreamLag once caught up = %+v, %v; want 0 bytes, 0s", lag, ok)
		}
	}
}

// Two CDC relays on one table: one streams, the other is refused the
// stream (ErrStreamBusy) and stands by; the first publishes every message
// once, in commit order; once it is cancelled, the second takes the
// stream over and publishes what follows, once and in commit order.
func TestBinlogCDCTwoRelays(t *testing.T) {
	e := newBinlogEnv(t)
	bd2 := e.binlog(t, e.cfg)
	s := &sent{more: make(chan struct{}, 1)}
	stop1 := runCDCRelay(t, e.bd, s, "r1")
	waitStreaming(t, e.bd, 20*time.Second)
	runCDCRelay(t, bd2, s, "r2")
	// A driver of its own: bd2's relay may be in a Stream call of its own.
	probe := e.binlog(t, e.cfg)
	err := probe.Stream(context.Background(), func(context.Context, []outbox.Message) error { return nil })
	if !errors.Is(err, outboxdriver.ErrStreamBusy) || !strings.Contains(err.Error(), outboxmysql.LockName(e.cfg.DBName, "outbox")) {
		t.Fatalf("a second Stream of the table = %v; want ErrStreamBusy naming the lock", err)
	}
	want := prefixed("r1/", interleaved(t, e, "a"))
	s.waitFor(t, want[len(want)-1], 20*time.Second)
	waitCaughtUp(t, e.bd)
	if _, ok := bd2.StreamLag(); ok {
		t.Fatal("the standby relay streams too")
	}
	stop1()
	if _, ok := e.bd.StreamLag(); ok {
		t.Fatal("StreamLag reports a stream after the relay ended")
	}
	waitStreaming(t, bd2, 20*time.Second)
	want = append(want, prefixed("r2/", interleaved(t, e, "b"))...)
	s.waitFor(t, want[len(want)-1], 20*time.Second)
	waitCaughtUp(t, bd2)
	if got := s.entries(); !equal(got, want) {
		t.Fatalf("published %v; want %v", got, want)
	}
}

func prefixed(p string, ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = p + id
	}
	return out
}

// StreamLag while fn holds a transaction: the bytes read past the
// confirmed position, more after a rotation, never more than the server's
// own lag figure (BinlogLag); Behind at least the time fn has held it;
// both 0 once fn returned; not ok before and after the Stream.
func TestBinlogCDCStreamLag(t *testing.T) {
	e := newBinlogEnv(t)
	ctx := context.Background()
	var sl outboxdriver.StreamLagger = e.bd
	if _, ok := sl.StreamLag(); ok {
		t.Fatal("StreamLag ok before any Stream")
	}
	entered, gate := make(chan struct{}, 4), make(chan struct{})
	fn := func(ctx context.Context, msgs []outbox.Message) error {
		entered <- struct{}{}
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return nil
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.bd.Stream(sctx, fn) }()
	defer func() { cancel(); <-done }()
	waitStreaming(t, e.bd, 20*time.Second)
	held := time.Now()
	insert(t, e.db, "g1")
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("g1 not streamed within 20s")
	}
	time.Sleep(1100 * time.Millisecond)
	lag, ok := sl.StreamLag()
	server, err := e.bd.BinlogLag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !ok || lag.Bytes <= 0 || lag.Bytes > server || lag.Behind < time.Since(held)-time.Second || lag.Behind > time.Minute {
		t.Fatalf("StreamLag while fn holds g1 = %+v, %v; want 0 < bytes <= %d (BinlogLag), behind about %s", lag, ok, server, time.Since(held))
	}
	e.srv.exec(t, "FLUSH BINARY LOGS")
	insert(t, e.db, "g2")
	rotated := lag
	for deadline := time.Now().Add(10 * time.Second); rotated.Bytes <= lag.Bytes; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("StreamLag after a rotation and a commit = %+v; want more than %d bytes", rotated, lag.Bytes)
		}
		rotated, _ = sl.StreamLag()
	}
	if rotated.Behind < lag.Behind {
		t.Fatalf("Behind went back from %s to %s while g1 is held", lag.Behind, rotated.Behind)
	}
	t.Log(fmt.Sprintf("lag while held: %d bytes, %s behind; %d bytes after a rotation (BinlogLag %d)", lag.Bytes, lag.Behind, rotated.Bytes, server))
	close(gate)
	waitCaughtUp(t, e.bd)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Stream = %v", err)
	}
	done <- nil
	if _, ok := sl.StreamLag(); ok {
		t.Fatal("StreamLag ok after the Stream ended")
	}
}

// A Stream whose lock connection is killed ends with an error within a few
// seconds, since another Stream may take the lock; another Stream then
// gets it.
func TestBinlogCDCLockKilled(t *testing.T) {
	e := newBinlogEnv(t)
	bd2 := e.binlog(t, e.cfg)
	nop := func(context.Context, []outbox.Message) error { return nil }
	done := make(chan error, 1)
	go func() { done <- e.bd.Stream(context.Background(), nop) }()
	waitStreaming(t, e.bd, 20*time.Second)
	var id int64
	if err := e.srv.root.QueryRow("SELECT IS_USED_LOCK(?)", outboxmysql.LockName(e.cfg.DBName, "outbox")).Scan(&id); err != nil {
		t.Fatal(err)
	}
	e.srv.exec(t, fmt.Sprintf("KILL %d", id))
	select {
	case err := <-done:
		if err == nil || errors.Is(err, outboxdriver.ErrStreamBusy) {
			t.Fatalf("Stream after its lock connection was killed = %v; want an error", err)
		}
		t.Logf("Stream ended: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("the Stream went on for 15s after its lock connection was killed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- bd2.Stream(ctx, nop) }()
	waitStreaming(t, bd2, 20*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("the second Stream = %v", err)
	}
}

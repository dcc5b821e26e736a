package outboxmysql_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
	"github.com/outbox-go/outbox/outboxdriver"
)

// published is a publisher that says when a msg_id went out.
type published struct {
	mu   sync.Mutex
	seen map[string]chan struct{}
}

func (p *published) ch(id string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[string]chan struct{}{}
	}
	c, ok := p.seen[id]
	if !ok {
		c = make(chan struct{})
		p.seen[id] = c
	}
	return c
}

func (p *published) Publish(_ context.Context, msgs []outbox.Message) []error {
	for _, m := range msgs {
		close(p.ch(m.MsgID))
	}
	return nil
}

// runRelay runs a relay on st whose polling backs off from 1ms to an hour.
func runRelay(t *testing.T, st outboxdriver.Store, noWatch bool) *published {
	t.Helper()
	pub := &published{}
	r, err := outbox.NewRelay(st, pub, outbox.RelayConfig{Interval: time.Hour, MinInterval: time.Millisecond, NoWatch: noWatch})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return pub
}

// The binlog watcher wakes a polling relay at the commit of a plain SQL
// insert: published within a second, while the same relay without the
// watcher, its polling backed off to seconds, has not published yet.
func TestBinlogWatcherWakesRelay(t *testing.T) {
	watched, control := newBinlogEnv(t), newBinlogEnv(t)
	pubW := runRelay(t, watched.bd, false)
	pubC := runRelay(t, control.bd, true)
	// The polling's wait doubles from 1ms: after 5s a look is seconds away.
	time.Sleep(5 * time.Second)
	start := time.Now()
	insert(t, watched.db, "wake1")
	insert(t, control.db, "ctl1")
	select {
	case <-pubW.ch("wake1"):
		t.Logf("published %s after the commit", time.Since(start))
	case <-time.After(time.Second):
		t.Fatal("the watched relay did not publish within 1s of the commit (its polling waits seconds)")
	}
	select {
	case <-pubC.ch("ctl1"):
		t.Fatal("the relay that does not watch published as soon: the test proves nothing")
	case <-time.After(time.Until(start.Add(time.Second))):
	}
}

// BinlogLag is the bytes of binary log between the confirmed position and
// the server's, across a rotation, and 0 once the stream has caught up.
func TestBinlogLag(t *testing.T) {
	e := newBinlogEnv(t)
	ctx := context.Background()
	if lag, err := e.bd.BinlogLag(ctx); err != nil || lag != 0 {
		t.Fatalf("BinlogLag before any Stream = %d, %v; want 0", lag, err)
	}
	s := &streamed{}
	r := runStream(t, e.bd, outboxmysql.BinlogPosition{}, s)
	waitStarted(t, e.bd)
	insert(t, e.db, "l1")
	s.waitFor(t, "l1", 20*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	conf := e.bd.Confirmed()
	insert(t, e.db, "l2")
	insert(t, e.db, "l3")
	cur, err := e.bd.ServerPosition(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lag, err := e.bd.BinlogLag(ctx)
	if err != nil || cur.File != conf.File || lag != int64(cur.Offset-conf.Offset) || lag <= 0 {
		t.Fatalf("BinlogLag = %d, %v; want %s - %s", lag, err, cur, conf)
	}
	e.srv.exec(t, "FLUSH BINARY LOGS")
	insert(t, e.db, "l4")
	rotated, err := e.bd.BinlogLag(ctx)
	if err != nil || rotated <= lag {
		t.Fatalf("BinlogLag after a rotation and a commit = %d, %v; want more than %d", rotated, err, lag)
	}
	t.Logf("lag %d bytes, %d after the rotation", lag, rotated)
	s2 := &streamed{}
	r2 := runStream(t, e.bd, outboxmysql.BinlogPosition{}, s2)
	s2.waitFor(t, "l4", 20*time.Second)
	// The server may log a checkpoint after the last commit: the stream
	// passes it too.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lag, err := e.bd.BinlogLag(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if lag == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("BinlogLag once caught up = %d; want 0 (confirmed %s)", lag, e.bd.Confirmed())
		}
	}
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	if got := s2.ids(); !equal(got, []string{"l2", "l3", "l4"}) {
		t.Fatalf("streamed %v across the rotation", got)
	}
}

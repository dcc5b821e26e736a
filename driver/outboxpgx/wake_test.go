package outboxpgx_test

import (
	"context"
	"database/sql"
	"encoding/json"
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

func TestWakeChannel(t *testing.T) {
	if got := outboxpgx.WakeChannel("app.outbox"); got != "app.outbox_wake" {
		t.Fatalf("WakeChannel = %q", got)
	}
	long := strings.Repeat("t", 63)
	a, b := outboxpgx.WakeChannel(long), outboxpgx.WakeChannel(long+"x")
	if len(a) > 63 || len(b) > 63 || a == b {
		t.Fatalf("long names: %q (%d), %q (%d)", a, len(a), b, len(b))
	}
}

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

// runWatched starts a relay on st whose polling waits an hour: a message
// is published soon only if a wake-up says so.
func runWatched(t *testing.T, st outboxdriver.Store, noWatch bool) *published {
	t.Helper()
	pub := &published{}
	r, err := outbox.NewRelay(st, pub, outbox.RelayConfig{Interval: time.Hour, MinInterval: time.Hour, NoWatch: noWatch})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// Let the first looks and the LISTEN happen.
	time.Sleep(300 * time.Millisecond)
	return pub
}

func wakeMsg(id string) outbox.Message {
	return outbox.Message{MsgID: id, Topic: "wake", Payload: json.RawMessage(`{}`)}
}

func waitPublished(t *testing.T, pub *published, id string, within time.Duration) bool {
	t.Helper()
	select {
	case <-pub.ch(id):
		return true
	case <-time.After(within):
		return false
	}
}

// WriteOnCommit wakes a relay in another pool at once (its polling would
// wait an hour); a relay that does not watch stays asleep.
func TestWriteOnCommitWakesRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := newSchema(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	relayPool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer relayPool.Close()
	// write commits one message to table through WriteOnCommit, for a
	// relay on table that watches or not.
	write := func(table, id string, noWatch bool) *published {
		d, err := outboxpgx.New(pool, outbox.Tables{Outbox: table})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		rd, _ := outboxpgx.New(relayPool, outbox.Tables{Outbox: table})
		pub := runWatched(t, rd, noWatch)
		w, _ := outbox.NewWriter(d, outbox.WriterConfig{})
		if err := d.WriteOnCommit(ctx, w, func(context.Context, pgx.Tx) ([]outbox.Message, error) {
			return []outbox.Message{wakeMsg(id)}, nil
		}); err != nil {
			t.Fatal(err)
		}
		return pub
	}
	if !waitPublished(t, write("wake_on", "w1", false), "w1", 5*time.Second) {
		t.Fatal("the watching relay did not publish within 5s of the commit")
	}
	if waitPublished(t, write("wake_off", "w2", true), "w2", 500*time.Millisecond) {
		t.Fatal("the relay that does not watch published at once too: the test proves nothing")
	}
}

// The stdlib driver: a plain transaction and Notify after the commit.
func TestStdlibNotifyWakesRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("pgx", newSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := outboxpgx.NewStdlib(db, outbox.Tables{Outbox: "wake_std"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pub := runWatched(t, d, false)
	if _, err := db.ExecContext(ctx, `INSERT INTO wake_std (msg_id, topic, payload) VALUES ('s1', 'wake', '{}')`); err != nil {
		t.Fatal(err)
	}
	d.Notify()
	if !waitPublished(t, pub, "s1", 5*time.Second) {
		t.Fatal("the relay did not publish within 5s of Notify")
	}
}

package outboxsqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
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
	if _, ok := p.seen[id]; !ok {
		p.seen[id] = make(chan struct{})
	}
	return p.seen[id]
}

func (p *published) Publish(_ context.Context, msgs []outbox.Message) []error {
	for _, m := range msgs {
		close(p.ch(m.MsgID))
	}
	return nil
}

func (p *published) within(id string, d time.Duration) bool {
	select {
	case <-p.ch(id):
		return true
	case <-time.After(d):
		return false
	}
}

func openDriver(t *testing.T, path string) (*sql.DB, *outboxsqlite.Driver) {
	t.Helper()
	db, err := outboxsqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := outboxsqlite.New(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return db, d
}

// A relay whose wait has grown past a second publishes at once a message
// written through RunInTx in its process, and one written by another
// *sql.DB on the file (as another process would, seen through
// data_version); with NoWatch it does neither.
func TestWatchWakesRelay(t *testing.T) {
	for _, tc := range []struct {
		name           string
		other, noWatch bool
	}{{"in-process", false, false}, {"other", true, false}, {"in-process-nowatch", false, true}, {"other-nowatch", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "outbox.db")
			_, d := openDriver(t, path)
			otherDB, _ := openDriver(t, path)
			pub := &published{}
			r, err := outbox.NewRelay(d, pub, outbox.RelayConfig{Interval: time.Hour, MinInterval: time.Millisecond, NoWatch: tc.noWatch})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); r.Run(ctx) }()
			defer func() { cancel(); <-done }()
			// The wait doubles from 1ms: 1+2+...+2048ms, so that from 3s on
			// the next look is about a second away.
			time.Sleep(3 * time.Second)
			if tc.other {
				_, err = otherDB.ExecContext(ctx, `INSERT INTO outbox (msg_id, topic, payload) VALUES ('m', 't', '{}')`)
			} else {
				w, _ := outbox.NewWriter(d, outbox.WriterConfig{})
				err = d.RunInTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
					return w.Write(ctx, tx, outbox.Message{MsgID: "m", Topic: "t", Payload: []byte(`{}`)})
				})
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := pub.within("m", 300*time.Millisecond); got == tc.noWatch {
				t.Fatalf("published within 300ms: %v, want %v", got, !tc.noWatch)
			}
		})
	}
}

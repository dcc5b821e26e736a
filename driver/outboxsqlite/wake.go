package outboxsqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

// ChangeCheckInterval is how often Watch looks at the database's files to
// see the commits of other processes.
const ChangeCheckInterval = 50 * time.Millisecond

// hubs holds, per *sql.DB, the relays of this process that watch it, so
// that every Driver on one *sql.DB wakes them.
var hubs sync.Map // *sql.DB → *hub

type hub struct {
	mu       sync.Mutex
	watchers map[*func(outboxdriver.Change)]struct{}
}

// watchOn adds fn to the hub of db and returns the function that takes it
// off again; the hub goes with its last watcher.
func watchOn(db *sql.DB, fn *func(outboxdriver.Change)) (stop func()) {
	for {
		v, _ := hubs.LoadOrStore(db, &hub{watchers: map[*func(outboxdriver.Change)]struct{}{}})
		h := v.(*hub)
		h.mu.Lock()
		if cur, _ := hubs.Load(db); cur != h {
			h.mu.Unlock() // its last watcher just left: take the new one
			continue
		}
		h.watchers[fn] = struct{}{}
		h.mu.Unlock()
		return func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			delete(h.watchers, fn)
			if len(h.watchers) == 0 {
				hubs.CompareAndDelete(db, h)
			}
		}
	}
}

func (h *hub) wake() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for fn := range h.watchers {
		(*fn)(outboxdriver.Change{Via: "process"})
	}
}

// Notify wakes the relays of this process that watch the driver's *sql.DB:
// call it after committing a transaction that wrote messages. RunInTx calls
// it itself. Relays in other processes see the commit in the database's
// files (see Watch).
func (d *Driver) Notify() {
	if h, ok := hubs.Load(d.sql.SQLDB()); ok {
		h.(*hub).wake()
	}
}

var _ outboxdriver.Watcher = (*Driver)(nil)

// Watch implements outboxdriver.Watcher. A commit through Notify (or RunInTx) in
// this process calls fn at once. The commits of other processes, and of
// transactions the application commits itself without Notify, are seen
// within ChangeCheckInterval: Watch reads the size and modification time of
// the database file and its -wal file (one stat call each), which every
// commit changes, and calls fn when they change. An in-memory database has
// no file: only Notify wakes the relay then.
func (d *Driver) Watch(ctx context.Context, fn func(outboxdriver.Change)) error {
	defer watchOn(d.sql.SQLDB(), &fn)()
	fn(outboxdriver.Change{Via: "start"})
	var path string
	if err := d.sql.SQLDB().QueryRowContext(ctx, "SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&path); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("outboxsqlite: watch: find the database file: %w", err)
	}
	if path == "" {
		<-ctx.Done()
		return nil
	}
	last := fileChanges(path)
	t := time.NewTicker(ChangeCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if now := fileChanges(path); now != last {
			last = now
			fn(outboxdriver.Change{Via: "file"})
		}
	}
}

// fileSig is what a commit changes in a file: its size or its time.
type fileSig struct {
	size int64
	mod  time.Time
}

// fileChanges reads the signature of the database file and its -wal file
// (zero for one that does not exist).
func fileChanges(path string) (s [2]fileSig) {
	for i, f := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(f); err == nil {
			s[i] = fileSig{fi.Size(), fi.ModTime()}
		}
	}
	return s
}

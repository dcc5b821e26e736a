package outboxsqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/outbox-go/outbox"
)

// DataVersionInterval is how often Watch reads PRAGMA data_version to see
// the commits of other processes.
const DataVersionInterval = 5 * time.Millisecond

// hubs holds, per *sql.DB, the relays of this process that watch it, so
// that every Driver on one *sql.DB wakes them.
var hubs sync.Map // *sql.DB → *hub

type hub struct {
	mu       sync.Mutex
	watchers map[*func(outbox.Change)]struct{}
}

// watchOn adds fn to the hub of db and returns the function that takes it
// off again; the hub goes with its last watcher.
func watchOn(db *sql.DB, fn *func(outbox.Change)) (stop func()) {
	for {
		v, _ := hubs.LoadOrStore(db, &hub{watchers: map[*func(outbox.Change)]struct{}{}})
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
		(*fn)(outbox.Change{Via: "process"})
	}
}

// Notify wakes the relays of this process that watch the driver's *sql.DB:
// call it after committing a transaction that wrote messages. RunInTx calls
// it itself. Relays in other processes see the commit through PRAGMA
// data_version (see Watch).
func (d *Driver) Notify() {
	if h, ok := hubs.Load(d.SQLDB()); ok {
		h.(*hub).wake()
	}
}

var _ outbox.Watcher = (*Driver)(nil)

// Watch implements outbox.Watcher. A commit through Notify (or RunInTx) in
// this process calls fn at once. The commits of other processes, and of
// transactions the application commits itself without Notify, are seen
// within DataVersionInterval: Watch holds one connection of the *sql.DB and
// reads PRAGMA data_version on it, which changes when another connection
// has committed and reads no table. A *sql.DB limited to one open
// connection is not held: only Notify wakes the relay then.
func (d *Driver) Watch(ctx context.Context, fn func(outbox.Change)) error {
	defer watchOn(d.SQLDB(), &fn)()
	fn(outbox.Change{Via: "start"})
	if d.SQLDB().Stats().MaxOpenConnections == 1 {
		<-ctx.Done()
		return nil
	}
	c, err := d.SQLDB().Conn(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("outboxsqlite: watch: %w", err)
	}
	defer c.Close()
	var last int64
	if err := c.QueryRowContext(ctx, "PRAGMA data_version").Scan(&last); err != nil {
		return watchErr(ctx, err)
	}
	t := time.NewTicker(DataVersionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var v int64
		if err := c.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
			return watchErr(ctx, err)
		}
		if v != last {
			last = v
			fn(outbox.Change{Via: "data_version"})
		}
	}
}

func watchErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("outboxsqlite: watch: data_version: %w", err)
}

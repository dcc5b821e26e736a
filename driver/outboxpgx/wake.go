package outboxpgx

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// WakeChannel returns the name of the PostgreSQL notification channel on
// which the relays of table outboxTable listen: the table's name with
// "_wake" appended, or, past PostgreSQL's 63 bytes, its first 46 bytes, a
// hash of the whole and "_wake". A writer in another language wakes the
// relays with SELECT pg_notify('<channel>', ”) after its COMMIT.
func WakeChannel(outboxTable string) string {
	name := outboxTable + "_wake"
	if len(name) <= 63 {
		return name
	}
	h := fnv.New64a()
	h.Write([]byte(outboxTable))
	return fmt.Sprintf("%s_%016x_wake", outboxTable[:40], h.Sum64())
}

// notifier sends the wake-up notification after commits, coalesced: at most
// one notification is on its way at a time, and commits that end while it is
// send one more after it, so that every commit is followed by a
// notification sent after it ended.
type notifier struct {
	send func(ctx context.Context) error

	mu       sync.Mutex
	inflight bool
	again    bool
}

// notifyTimeout bounds one notification.
const notifyTimeout = 5 * time.Second

// notify asks for a notification; it never blocks.
func (n *notifier) notify() {
	n.mu.Lock()
	if n.inflight {
		n.again = true
		n.mu.Unlock()
		return
	}
	n.inflight = true
	n.mu.Unlock()
	go n.run()
}

func (n *notifier) run() {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
		// A notification that fails costs latency only: the relay's polling
		// finds the rows.
		_ = n.send(ctx)
		cancel()
		n.mu.Lock()
		if !n.again {
			n.inflight = false
			n.mu.Unlock()
			return
		}
		n.again = false
		n.mu.Unlock()
	}
}

// Notify wakes the relays that watch this driver's outbox table, in every
// process (a pg_notify on the table's WakeChannel): call it after committing
// a transaction that wrote messages, never inside it (a NOTIFY in the
// transaction would make every commit wait for the others'). WriteOnCommit
// calls it itself. It returns at once; the notification goes out on a
// connection of the pool, coalesced with those of other commits.
func (d *Driver) Notify() { d.notifier().notify() }

func (d *Driver) notifier() *notifier {
	d.notifyOnce.Do(func() {
		ch := WakeChannel(d.Tables().Outbox)
		d.notify = &notifier{send: func(ctx context.Context) error {
			_, err := d.pool.Exec(ctx, "SELECT pg_notify($1, '')", ch)
			return err
		}}
	})
	return d.notify
}

var _ outboxdriver.Watcher = (*Driver)(nil)

// Watch implements outboxdriver.Watcher: it LISTENs on the table's WakeChannel on
// a connection of its own, opened with the pool's configuration and not
// counted in the pool, and calls fn for every notification.
//
// Where the server can stream (see Stream), it watches the outbox table's
// inserts through a temporary replication slot of its own instead, and so
// learns of the commits of every writer, plain SQL included (Change.Via
// "stream"); where it cannot, its "start" change carries the reason in
// Change.Fallback, and it LISTENs.
func (d *Driver) Watch(ctx context.Context, fn func(outboxdriver.Change)) error {
	err := d.watchStream(ctx, fn)
	if !errors.Is(err, outboxdriver.ErrStreamUnavailable) {
		return err
	}
	conn, cerr := pgx.ConnectConfig(ctx, d.pool.Config().ConnConfig.Copy())
	if cerr != nil {
		return fmt.Errorf("outboxpgx: watch: connect: %w", cerr)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return listen(ctx, conn, WakeChannel(d.Tables().Outbox), fn, err)
}

// watchStream watches through a stream of a slot of its own, which
// confirms every commit as soon as it has read it.
func (d *Driver) watchStream(ctx context.Context, fn func(outboxdriver.Change)) error {
	s := &pgStream{d: d, slot: slotName(d.Tables().Outbox, "_w_"+newSuffix()),
		started: func() { fn(outboxdriver.Change{Via: "start"}) },
		deliver: func(context.Context, []outbox.Message) error {
			fn(outboxdriver.Change{Via: "stream"})
			return nil
		}}
	return s.run(ctx)
}

// listen LISTENs on channel and calls fn once at the start (with fallback,
// the reason it does not stream) and then for every notification, until
// ctx ends (nil) or the connection fails.
func listen(ctx context.Context, conn *pgx.Conn, channel string, fn func(outboxdriver.Change), fallback error) error {
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("outboxpgx: watch: listen: %w", err)
	}
	fn(outboxdriver.Change{Via: "start", Fallback: fallback})
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("outboxpgx: watch: %w", err)
		}
		fn(outboxdriver.Change{Via: "notify"})
	}
}

// Notify is Driver.Notify for the stdlib driver: the notification goes out
// on a connection of the *sql.DB.
func (d *StdlibDriver) Notify() { d.notifier().notify() }

func (d *StdlibDriver) notifier() *notifier {
	d.notifyOnce.Do(func() {
		ch := WakeChannel(d.Tables().Outbox)
		d.notify = &notifier{send: func(ctx context.Context) error {
			_, err := d.sql.SQLDB().ExecContext(ctx, "SELECT pg_notify($1, '')", ch)
			return err
		}}
	})
	return d.notify
}

var _ outboxdriver.Watcher = (*StdlibDriver)(nil)

// Watch implements outboxdriver.Watcher as Driver's does, on one connection of
// the *sql.DB, held out of it while the relay watches.
func (d *StdlibDriver) Watch(ctx context.Context, fn func(outboxdriver.Change)) error {
	c, err := d.sql.SQLDB().Conn(ctx)
	if err != nil {
		return fmt.Errorf("outboxpgx: watch: connect: %w", err)
	}
	defer c.Close()
	err = c.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errors.New("outboxpgx: watch: the *sql.DB was not opened with pgx's stdlib")
		}
		// LISTEN stays on the connection: driver.ErrBadConn makes
		// database/sql close it rather than give it back to the pool, where
		// it would gather notifications no one reads.
		if werr := listen(ctx, sc.Conn(), WakeChannel(d.Tables().Outbox), fn, nil); werr != nil {
			return fmt.Errorf("%w (%w)", werr, driver.ErrBadConn)
		}
		return driver.ErrBadConn
	})
	if errors.Is(err, driver.ErrBadConn) && ctx.Err() != nil {
		return nil
	}
	return err
}

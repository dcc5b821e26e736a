package outboxmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"sync/atomic"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

// lockCheck is how often a Stream makes sure that it still holds its lock.
const lockCheck = 5 * time.Second

// errLockLost ends a Stream whose lock connection failed: another Stream
// of the table may have started since.
var errLockLost = errors.New("outboxmysql: binlog: the stream's lock connection failed")

// LockName returns the name of the lock (GET_LOCK) that a Stream of the
// outbox table schema.table holds: "outbox_cdc:" then schema.table, or,
// past the server's 64 characters, its first 40 characters and a hash of
// the whole.
func LockName(schema, table string) string {
	name := "outbox_cdc:" + schema + "." + table
	if len(name) <= 64 {
		return name
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return fmt.Sprintf("%s_%016x", name[:40], h.Sum64())
}

// lock takes the table's stream lock on a connection of its own, or
// returns an error matching outboxdriver.ErrStreamBusy when another connection
// holds it. The context it returns ends, with errLockLost as its cause,
// when the connection fails; release frees the lock and the connection.
func (b *BinlogDriver) lock(ctx context.Context) (context.Context, func(), error) {
	name := LockName(b.schema, b.table)
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return ctx, nil, fmt.Errorf("outboxmysql: binlog: lock: %w", err)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", name).Scan(&got); err != nil {
		conn.Close()
		return ctx, nil, fmt.Errorf("outboxmysql: binlog: lock %s: %w", name, err)
	}
	if !got.Valid || got.Int64 != 1 {
		conn.Close()
		return ctx, nil, fmt.Errorf("%w: the lock %s is held by another connection", outboxdriver.ErrStreamBusy, name)
	}
	lctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(lockCheck)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := conn.PingContext(lctx); err != nil && lctx.Err() == nil {
					cancel(fmt.Errorf("%w: %w", errLockLost, err))
					return
				}
			}
		}
	}()
	release := func() {
		close(done)
		cancel(nil)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer rcancel()
		_, _ = conn.ExecContext(rctx, "DO RELEASE_LOCK(?)", name) // closing frees it too
		conn.Close()
	}
	return lctx, release, nil
}

// ended is the error a Stream returns: err, or, once ctx ended, nil
// unless the lock was lost.
func (b *BinlogDriver) ended(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	if cause := context.Cause(ctx); errors.Is(cause, errLockLost) {
		return cause
	}
	return nil
}

// lagState is what StreamLag reports, kept by the Stream that runs.
type lagState struct {
	live      bool         // a Stream streams
	recv      atomic.Int64 // the reader's position (reader.lin)
	confirmed int64        // the position confirmed, as reader.lin
	oldest    time.Time    // the commit time of the oldest transaction not confirmed
}

func (b *BinlogDriver) setLive(live bool) {
	b.mu.Lock()
	b.lag.live = live
	b.lag.oldest = time.Time{}
	b.mu.Unlock()
}

// noteOldest records the commit time of a transaction received, when no
// earlier one waits to be confirmed.
func (b *BinlogDriver) noteOldest(t time.Time) {
	b.mu.Lock()
	if b.lag.oldest.IsZero() {
		b.lag.oldest = t
	}
	b.mu.Unlock()
}

// StreamLag implements outboxdriver.StreamLagger without a query: Bytes is the
// binary log the running Stream has read past the position it confirmed,
// across rotations; Behind is the age of the oldest transaction it
// received and has not confirmed, by the server's commit time (whole
// seconds). ok is false while no Stream streams. BinlogLag measures the
// bytes against the server's own position instead.
func (b *BinlogDriver) StreamLag() (outboxdriver.StreamLag, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.lag.live {
		return outboxdriver.StreamLag{}, false
	}
	lag := outboxdriver.StreamLag{Bytes: max(0, b.lag.recv.Load()-b.lag.confirmed)}
	if !b.lag.oldest.IsZero() {
		lag.Behind = max(time.Since(b.lag.oldest), 0)
	}
	return lag, true
}

package outboxsqlite

import (
	"context"
	"database/sql/driver"
	"sync"
)

// checkpointer checkpoints the WAL of one *sql.DB's file on a connection of
// its own, in a goroutine, so that the writer whose commit made a checkpoint
// due, or the caller that takes its connection next, does not wait while the
// checkpoint copies and syncs. A writer that finds the WAL at
// inlineCheckpointPages or more checkpoints itself, so that writes faster
// than the checkpoints cannot grow the WAL without end.
type checkpointer struct {
	connect func(context.Context) (driver.Conn, error)
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	// mu is held while a checkpoint runs, the checkpointer's or a writer's
	// (inline), so that the inline one waits for the other and then copies
	// what it left.
	mu sync.Mutex
}

// inlineCheckpointPages is the WAL's size, in frames, at which a writer
// checkpoints inline instead of leaving it to the checkpointer.
const inlineCheckpointPages = 2 * autoCheckpointPages

// newCheckpointer starts a checkpointer; it opens its connection with
// connect at the first request. close stops it.
func newCheckpointer(connect func(context.Context) (driver.Conn, error)) *checkpointer {
	k := &checkpointer{connect: connect, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go k.run()
	return k
}

// request asks for a checkpoint and returns at once.
func (k *checkpointer) request() {
	select {
	case k.kick <- struct{}{}:
	default: // one is asked for already
	}
}

func (k *checkpointer) run() {
	defer close(k.done)
	var conn driver.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		select {
		case <-k.stop:
			return
		case <-k.kick:
		}
		if conn == nil {
			c, err := k.connect(context.Background())
			if err != nil {
				continue // the next write asks again
			}
			conn = c
		}
		if ex, ok := conn.(driver.ExecerContext); ok {
			k.mu.Lock()
			_, err := ex.ExecContext(context.Background(), checkpointSQL, nil)
			k.mu.Unlock()
			if err != nil {
				conn.Close()
				conn = nil
			}
		}
	}
}

// inline checkpoints on ex, the connection of a writer, after any
// checkpoint under way.
func (k *checkpointer) inline(ex driver.ExecerContext) {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, _ = ex.ExecContext(context.Background(), checkpointSQL, nil)
}

// checkpointSQL is a PASSIVE checkpoint, as SQLite's automatic one: it
// copies what no reader still needs and waits for nobody.
const checkpointSQL = "PRAGMA wal_checkpoint(PASSIVE)"

// close stops the checkpointer and waits for a checkpoint under way. It is
// called once.
func (k *checkpointer) close() {
	close(k.stop)
	<-k.done
}

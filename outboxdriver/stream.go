package outboxdriver

import (
	"context"
	"errors"
	"time"
)

// Streamer is implemented by a Store that reads the outbox table's inserts
// from the database's change stream (PostgreSQL: logical replication with
// pgoutput; MySQL and MariaDB: the binary log in ROW format), in the commit
// order of their transactions.
type Streamer interface {
	// Stream reads the inserts committed to the outbox table until ctx
	// ends or the stream fails, and calls fn with the messages of one or
	// more transactions, in commit order and in insert order within a
	// transaction. The messages carry every column the insert wrote; their
	// Attempts are 0. Stream confirms a position to the server only after
	// fn has returned nil for every message up to it, so a stream started
	// again resumes at or before the first message fn did not finish. An
	// error from fn ends Stream with that error.
	//
	// When the server cannot stream (PostgreSQL: wal_level is not logical,
	// or the role may not replicate; MySQL: binlog off or not ROW, or the
	// user lacks REPLICATION SLAVE and REPLICATION CLIENT), Stream returns
	// an error matching ErrStreamUnavailable that says what to change.
	Stream(ctx context.Context, fn func(ctx context.Context, msgs []Message) error) error
}

// ErrStreamUnavailable is matched (errors.Is) by the error a Streamer
// returns when the database's settings or the role's privileges do not let
// it read the change stream. The relay then polls.
var ErrStreamUnavailable = errors.New("outbox: change stream unavailable")

// ErrStreamBusy is matched (errors.Is) by the error a Streamer returns when
// another relay streams the same table: one stream per table runs at a time
// (PostgreSQL: the replication slot; MySQL: a named lock). The CDC relay
// stands by, polls slowly, and tries again.
var ErrStreamBusy = errors.New("outbox: change stream taken by another relay")

// IDClaimer is implemented by a Store that can claim given messages by id,
// as the CDC relay does with the messages a Streamer delivers.
type IDClaimer interface {
	// ClaimIDs claims those of ids whose rows are NEW, due, and held by no
	// other claim, as Claim would, under a lease of lease. Rows already
	// SENT or DEAD, or claimed by another relay or the polling sweep, are
	// left out: the claim may hold fewer messages than ids, or none. Its
	// Messages are in id order.
	ClaimIDs(ctx context.Context, ids []int64, lease time.Duration) (Claim, error)
}

// StreamLag is how far a running stream is behind the server's change log.
type StreamLag struct {
	// Bytes of log the server has written past the position the stream
	// last confirmed.
	Bytes int64
	// Behind is the age, by the server's commit time, of the oldest
	// transaction received and not yet confirmed; 0 when caught up.
	Behind time.Duration
}

// StreamLagger is implemented by a Streamer that can tell its lag.
type StreamLagger interface {
	// StreamLag returns the lag of the stream running now; ok is false
	// while no Stream call streams.
	StreamLag() (lag StreamLag, ok bool)
}

package outbox

import (
	"context"
	"errors"
)

// Streamer is implemented by a Store that reads the outbox table's inserts
// from the database's change stream (PostgreSQL: logical replication with
// pgoutput; MySQL and MariaDB: the binary log in ROW format), in the commit
// order of their transactions.
//
// This interface is for driver authors and is not stable.
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

package outboxdriver

import (
	"context"
	"time"
)

// Backlog is what waits in the outbox table: the numbers an operator alerts
// on (a relay falling behind, messages gone DEAD).
type Backlog struct {
	// Pending is the number of NEW messages, due or waiting out a retry's
	// backoff.
	Pending int64
	// OldestPendingAge is the age of the oldest NEW message (0 when none).
	OldestPendingAge time.Duration
	// Dead is the number of DEAD messages, when DeadCounted.
	Dead int64
	// DeadCounted reports whether the store counted the DEAD messages. A
	// store that has no index to find them leaves them uncounted rather than
	// read the whole table. The SQL stores count them on every dialect
	// (PostgreSQL since schema version 5, through an index on dead_at, since
	// its HOT claim keeps status out of every index; SQLite since version 3;
	// MariaDB/MySQL through the pending index).
	DeadCounted bool
}

// BacklogReader is implemented by a Store that reads its Backlog at a cost
// that grows with the backlog, not with the table: unlike [Store.Stats], it
// does not count the SENT history, so that a metrics scrape every few
// seconds stays cheap on a table of millions of rows.
type BacklogReader interface {
	Backlog(ctx context.Context) (Backlog, error)
}

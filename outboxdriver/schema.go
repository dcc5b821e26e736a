package outboxdriver

import (
	"context"
	"time"
)

// SchemaChecker is implemented by a store that can compare the database
// with the schema its build needs, for `outbox migrate --check` and
// `outbox migrate --status`.
type SchemaChecker interface {
	// LatestVersion returns the newest migration the store knows.
	LatestVersion() int
	// CheckSchema compares the database with the schema the store needs.
	// It changes nothing.
	CheckSchema(ctx context.Context) (SchemaCheck, error)
}

// SchemaCheck is what CheckSchema found.
type SchemaCheck struct {
	// Version is the recorded schema version; Latest the newest one the
	// store knows.
	Version, Latest int
	// Problems says what differs from the schema the store needs, one
	// sentence each; none when the schema is current.
	Problems []string
	// Unlisted names the columns, indexes and triggers of the tables that
	// the check does not know: your own additions, or, on tables that only
	// 'outbox migrate' made, something a migration added that the check
	// does not yet look at. They are not problems.
	Unlisted []string
}

// RescanMarker is implemented by a store that keeps a low-water mark for
// the relays' rescans (PostgreSQL), for `outbox stats`.
type RescanMarker interface {
	// RescanMark returns the mark; ok is false when the store keeps none.
	RescanMark(ctx context.Context) (m RescanMark, ok bool, err error)
}

// RescanMark is where a PostgreSQL relay's rescans start: every row at or
// below ID is SENT, DEAD, or in the requeued index. A mark far behind the
// newest row means something holds it back (a transaction left open, a
// prepared transaction), and each rescan walks the rows in between.
type RescanMark struct {
	ID int64
	// NewestID is the highest id in the table.
	NewestID int64
	// Behind is how long ago the first row above the mark was written (0 when
	// there is none).
	Behind time.Duration
}

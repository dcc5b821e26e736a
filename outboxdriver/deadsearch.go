package outboxdriver

import (
	"context"
	"time"
)

// DeadSearcher is implemented by stores that search their DEAD messages by
// more than topic, for an operator's console (package console). Every
// method reads the DEAD rows through the store's DEAD index, never the
// table's SENT history.
type DeadSearcher interface {
	// SearchDead returns the DEAD messages that match q, oldest id first,
	// without payloads, and the after_id of the next page (0 when there is
	// none). One call reads at most q.Scan DEAD rows, whatever it finds
	// among them, so that a filter that matches few rows still answers
	// quickly: the page may then hold fewer than q.Limit messages and still
	// have a next one.
	SearchDead(ctx context.Context, q DeadQuery) (msgs []Message, next int64, err error)
	// CountDead counts the DEAD messages that match q (q.AfterID, q.Limit
	// and q.Scan aside), up to limit+1, and returns the largest id and
	// dead_at among those counted.
	CountDead(ctx context.Context, q DeadQuery, limit int) (DeadCount, error)
}

// DeadQuery selects DEAD messages. Every field that is set narrows it.
type DeadQuery struct {
	// MsgID selects one message by its msg_id.
	MsgID string
	// Topic and Key select the messages of one topic and one key.
	Topic, Key string
	// ErrorContains selects the messages whose last_error contains it,
	// ignoring case.
	ErrorContains string
	// DeadFrom and DeadUntil bound dead_at, both inclusive.
	DeadFrom, DeadUntil time.Time
	// AfterID selects ids above it (paging); MaxID, when above 0, ids at
	// or below it (a bulk action's bound).
	AfterID, MaxID int64
	// Limit caps the messages returned. Defaults to 100.
	Limit int
	// Scan caps the DEAD rows one SearchDead call reads. Defaults to 10000.
	Scan int
}

// DeadCount is what CountDead found.
type DeadCount struct {
	// Count is how many matched, at most limit+1.
	Count int64
	// MaxID and LastDeadAt are the largest id and dead_at among them.
	MaxID      int64
	LastDeadAt time.Time
}

// TopicBacklogReader is implemented by stores that read the backlog per
// topic through their indexes: the NEW rows and the DEAD rows, never the
// SENT history.
type TopicBacklogReader interface {
	// TopicBacklog returns the pending count, oldest pending age and DEAD
	// count of every topic that has a NEW or a DEAD message, sorted by
	// topic, and the largest id in the table.
	TopicBacklog(ctx context.Context) (topics []TopicBacklog, maxID int64, err error)
}

// TopicBacklog is the backlog of one topic.
type TopicBacklog struct {
	Topic            string
	Pending          int64
	OldestPendingAge time.Duration
	Dead             int64
}

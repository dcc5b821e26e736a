package outboxdriver

import (
	"context"
	"fmt"
)

// DueChecker is implemented by a Store that can tell, in one cheap
// statement, whether a claim from the first id could find a message. While
// the table stays empty outbox.Relay.Run asks it instead of claiming.
type DueChecker interface {
	// AnyDue reports whether a message may be NEW and due. It may report
	// true when a claim finds nothing (rows another relay holds), never
	// false while a committed message is NEW and due.
	AnyDue(ctx context.Context) (bool, error)
}

// Watcher is implemented by a Store that learns of commits to the outbox
// table as they happen (PostgreSQL: LISTEN; SQLite: data_version). outbox.Relay.Run
// watches while it runs, unless outbox.RelayConfig.NoWatch, and looks for messages
// at once on every change; its polling stays on as the safety net for
// commits no watcher reports.
type Watcher interface {
	// Watch runs until ctx ends, then returns nil. It calls fn, which must
	// not block, whenever rows may have been committed to the outbox table,
	// and once when it starts watching, for the commits made before. It
	// returns an error when it cannot watch (or stops watching); the relay
	// logs it, polls, and calls Watch again after a pause.
	Watch(ctx context.Context, fn func(Change)) error
}

// Change is what a Watcher learned of one or more commits.
type Change struct {
	// Via names how the watcher learned of it: "stream" (PostgreSQL's
	// logical replication), "notify", "data_version", "process" or
	// "start".
	Via string
	// Fallback, set on a "start" change, says why the watcher watches by a
	// slower way than it could (an error matching ErrStreamUnavailable that
	// says what to change). The relay logs it once.
	Fallback error
}

// ClaimOverlap says how far outbox.Relay.Run may overlap the claim of the next batch
// with the batch before it.
type ClaimOverlap int

const (
	// OverlapAll: claim while the previous batch is published and marked.
	// The store's claims never make another claim's Finish wait (PostgreSQL's
	// chunk locks). The default for a store that does not say.
	OverlapAll ClaimOverlap = iota
	// OverlapPublish: claim while the previous batch is published, never
	// while it is marked, for a store whose claims and marks take one write
	// lock and hold no connection in between (SQLite): beside each other they
	// would only wait for that lock.
	OverlapPublish
	// OverlapNone: claim only once the previous batch is marked, for a store
	// whose open claim could make a mark wait (MySQL: InnoDB's row and gap
	// locks), which with Run's claim held ahead would stall the relay.
	OverlapNone
)

func (o ClaimOverlap) String() string {
	switch o {
	case OverlapAll:
		return "OverlapAll"
	case OverlapPublish:
		return "OverlapPublish"
	case OverlapNone:
		return "OverlapNone"
	}
	return fmt.Sprintf("ClaimOverlap(%d)", int(o))
}

// ClaimOverlapper is implemented by a Store that needs outbox.Relay.Run to overlap
// less than OverlapAll.
type ClaimOverlapper interface {
	ClaimOverlap() ClaimOverlap
}

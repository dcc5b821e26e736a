package outboxdriver

import (
	"context"
	"time"
)

// Driver is the seam between the outbox and one database library: it runs the
// dialect's SQL on the caller's transactions (of type TTx: pgx.Tx, *sql.Tx) and
// on its own connections. outbox.NewWriter takes its Inserter part,
// outbox.NewInbox its InboxStore part, outbox.NewRelay, outbox.NewCleaner and
// package admin the parts of its Store they use.
type Driver[TTx any] interface {
	Store
	Inserter[TTx]
	InboxStore[TTx]
}

// Inserter is the part of a Driver that outbox.Writer writes through.
type Inserter[TTx any] interface {
	// InsertTx inserts msgs, already validated, in tx. All or nothing: when a
	// msg_id exists it returns a *outbox.DuplicateError, inserts none of msgs
	// and leaves tx usable.
	InsertTx(ctx context.Context, tx TTx, msgs []Message) error
}

// InboxStore is the part of a Driver that outbox.Inbox records consumed
// messages through.
type InboxStore[TTx any] interface {
	// MarkConsumedTx records (group, msgID) in the inbox table in tx and reports
	// whether it was new. A duplicate returns false and leaves tx usable. An
	// error that means the database cannot be reached satisfies
	// outbox.IsUnavailable (outbox.DatabaseUnavailable).
	MarkConsumedTx(ctx context.Context, tx TTx, group, msgID string) (bool, error)

	// RunInTx runs fn in a new transaction, committed when fn returns nil and
	// rolled back otherwise. An error that means the database cannot be
	// reached (it cannot connect, the connection was lost, the server is
	// shutting down), fn's included, satisfies outbox.IsUnavailable
	// (outbox.DatabaseUnavailable), unless it satisfies outbox.IsPermanent.
	RunInTx(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error
}

// Store is the part of a Driver that works on its own connections: the relay's
// claim and mark, migrations, the admin calls and the cleanup.
type Store interface {
	Describer
	Migrator
	Claimer
	Admin
	Pruner
}

// Describer names what a store works on.
type Describer interface {
	// Dialect names the SQL dialect: "postgres", "mysql" or "sqlite".
	Dialect() string
	// Tables returns the validated table names the store works on.
	Tables() Tables
}

// Migrator creates and upgrades the tables.
type Migrator interface {
	// Migrate creates or upgrades the tables. Safe to run again and from several
	// processes at once.
	Migrate(ctx context.Context) error
	// SchemaVersion returns the latest applied migration (0 when none).
	SchemaVersion(ctx context.Context) (int, error)
}

// Claimer is what outbox.NewRelay takes: the claim of due messages. The
// relay also uses those of the optional interfaces of this package that the
// Claimer implements (ClaimOverlapper, DueChecker, Watcher, KeyOrderer,
// Streamer and IDClaimer).
type Claimer interface {
	Describer
	// Claim takes up to p.Limit messages that are NEW and due, oldest id first,
	// such that no other claim holds any of them until this one is finished or
	// aborted (or, for lease-based stores, until p.Lease has passed).
	// outbox.Relay.Run may hold the next claim while it finishes the previous one,
	// so an open claim must never make another claim's Finish wait; a store
	// that cannot promise that implements ClaimOverlapper.
	Claim(ctx context.Context, p ClaimParams) (Claim, error)
}

// Admin is what package admin's handler takes: the calls an operator makes.
// The handler also uses BacklogReader when the Admin implements it; package
// console needs DeadSearcher and TopicBacklogReader as well.
type Admin interface {
	Describer
	// Stats counts messages per status and topic.
	Stats(ctx context.Context) (Stats, error)
	// ListMessages lists messages by filter, oldest first, without payloads.
	ListMessages(ctx context.Context, f ListFilter) ([]Message, error)
	// GetMessage returns one message with its payload, or outbox.ErrNotFound.
	GetMessage(ctx context.Context, msgID string) (Message, error)
	// RetryDead moves matching DEAD messages back to NEW with their retry count
	// reset, recording note in last_error. It returns how many moved.
	RetryDead(ctx context.Context, f DeadFilter, note string) (int64, error)
	// DropDead deletes matching DEAD messages and returns how many.
	DropDead(ctx context.Context, f DeadFilter) (int64, error)
}

// Pruner is what outbox.NewCleaner takes: the deletion of old rows.
type Pruner interface {
	Describer
	// DeleteSent deletes at most limit SENT messages sent before the cutoff
	// (database clock minus olderThan) and returns how many.
	DeleteSent(ctx context.Context, olderThan time.Duration, limit int) (int64, error)
	// DeleteConsumed deletes at most limit records of the inbox table
	// consumed before the cutoff (database clock minus olderThan), of every
	// consumer group, and returns how many. A duplicate of a message whose
	// record is gone is no longer recognised: keep records longer than any
	// message can arrive again.
	DeleteConsumed(ctx context.Context, olderThan time.Duration, limit int) (int64, error)
}

// ClaimParams says what to claim.
type ClaimParams struct {
	// Limit is the largest number of messages to claim.
	Limit int
	// AfterID restricts the claim to ids greater than AfterID (0: from the
	// start). The relay uses it to start its index scan past the rows it has
	// just handled, instead of walking their dead index entries again. With
	// 0 a store must find every due row, wherever it is; a store may start
	// from a point below which it knows there is none but the ones it can
	// find another way (PostgreSQL's low-water mark and requeued index).
	AfterID int64
	// Lease is how long the claim hides its messages from other claims; it
	// must be positive.
	Lease time.Duration
	// Prev, when set, is the claim the same relay made just before this
	// one, which it may still hold (Run claims a batch while the previous
	// one is published). A store whose unit of lease is larger than a row
	// may let this claim take over what Prev holds of the rows past Prev's
	// last message, so that a batch that ended inside such a unit does not
	// leave the rest of it to a later rescan. Prev's own messages must stay
	// out of this claim. Nil: no predecessor.
	Prev Claim
}

// Claim is a batch of messages held by one relay.
type Claim interface {
	// Messages returns the claimed messages in id order.
	Messages() []Message
	// Finish records one outcome per message (same order as Messages) in one
	// transaction and releases the claim. When it fails, nothing is
	// recorded, and the store gives the claim up where it still can (as
	// Abort), so that its messages are due again at once rather than when
	// the lease runs out.
	Finish(ctx context.Context, outcomes []Outcome) error
	// Abort releases the claim with nothing recorded: every message stays NEW
	// with its retry count unchanged.
	Abort(ctx context.Context) error
}

// OutcomeKind is what became of one claimed message.
type OutcomeKind uint8

const (
	// OutcomeSent: acked by the broker; the row becomes SENT.
	OutcomeSent OutcomeKind = iota
	// OutcomeRetry: refused; retries+1, next_retry_at = now + Delay, last_error kept.
	OutcomeRetry
	// OutcomeDead: refused for the last time; retries+1, status DEAD.
	OutcomeDead
	// OutcomeRelease: not attempted or the broker was unreachable; unchanged.
	OutcomeRelease
)

// Outcome is what the relay asks the store to record for one message.
type Outcome struct {
	Kind  OutcomeKind
	Delay time.Duration
	Error string
}

// Stats is a snapshot of the outbox table, read through indexes only: its
// cost grows with the NEW and DEAD rows, never with the SENT history.
type Stats struct {
	// Pending is the exact count of NEW messages.
	Pending int64
	// Sent is an estimate of the SENT messages: the span of ids in the table
	// (newest minus oldest, plus one) less Pending and Dead. Ids never used
	// (rolled-back writes, a sequence's cache) and rows deleted between the
	// oldest and the newest count as SENT; it is exact while the ids are
	// dense. It is never negative.
	Sent int64
	// SentEstimated is true when Sent is an estimate (every store of this
	// module); false means an exact count.
	SentEstimated bool
	// Dead is the exact count of DEAD messages.
	Dead int64
	// OldestPendingAge is the age of the oldest NEW message (0 when none).
	OldestPendingAge time.Duration
	// Topics holds the same counts per topic that has NEW or DEAD messages,
	// sorted by topic.
	Topics []TopicStats
}

// TopicStats are the counts of one topic: its NEW and DEAD messages (SENT
// ones are not counted per topic).
type TopicStats struct {
	Topic            string
	Pending          int64
	Dead             int64
	OldestPendingAge time.Duration
}

// ListFilter selects messages to list.
type ListFilter struct {
	// Status selects one status.
	Status Status
	// Topic, when set, selects one topic.
	Topic string
	// AfterID lists messages with a larger id (for paging).
	AfterID int64
	// Limit caps the result. Defaults to 100.
	Limit int
}

// DeadFilter selects DEAD messages for RetryDead and DropDead: either the listed
// msg_ids, or with All every DEAD message (of Topic, when set).
type DeadFilter struct {
	MsgIDs []string
	All    bool
	Topic  string
}

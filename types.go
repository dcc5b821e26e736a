package outbox

import "github.com/outbox-go/outbox/outboxdriver"

// The types an application shares with the drivers are defined in package
// outboxdriver, the driver contract; these names are the same types.

// Message is one row of the outbox table; see [outboxdriver.Message].
type Message = outboxdriver.Message

// Status is where a message is in its life: NEW, SENT or DEAD.
type Status = outboxdriver.Status

// The statuses of a message.
const (
	StatusNew  = outboxdriver.StatusNew
	StatusSent = outboxdriver.StatusSent
	StatusDead = outboxdriver.StatusDead
)

// Tables names the outbox and inbox tables; see [outboxdriver.Tables].
type Tables = outboxdriver.Tables

// Default table names.
const (
	DefaultOutboxTable = outboxdriver.DefaultOutboxTable
	DefaultInboxTable  = outboxdriver.DefaultInboxTable
)

// ErrInvalidIdentifier reports a table name that is not a plain SQL
// identifier (Tables.Validate).
var ErrInvalidIdentifier = outboxdriver.ErrInvalidIdentifier

// Outcome is what the relay recorded for one message (MessageResult).
type Outcome = outboxdriver.Outcome

// OutcomeKind is what became of one claimed message.
type OutcomeKind = outboxdriver.OutcomeKind

// The outcomes of a claimed message.
const (
	OutcomeSent    = outboxdriver.OutcomeSent
	OutcomeRetry   = outboxdriver.OutcomeRetry
	OutcomeDead    = outboxdriver.OutcomeDead
	OutcomeRelease = outboxdriver.OutcomeRelease
)

// Stats is a snapshot of the outbox table (a driver's Stats).
type Stats = outboxdriver.Stats

// TopicStats are the counts of one topic in Stats.
type TopicStats = outboxdriver.TopicStats

// ListFilter selects messages for a driver's ListMessages.
type ListFilter = outboxdriver.ListFilter

// DeadFilter selects DEAD messages for a driver's RetryDead and DropDead.
type DeadFilter = outboxdriver.DeadFilter

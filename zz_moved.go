package outbox

import "github.com/outbox-go/outbox/outboxdriver"

// Temporary aliases of the names moved to outboxdriver; the next commit
// renames their uses and removes this file.

type (
	Driver[TTx any]    = outboxdriver.Driver[TTx]
	Store              = outboxdriver.Store
	ClaimParams        = outboxdriver.ClaimParams
	Claim              = outboxdriver.Claim
	Backlog            = outboxdriver.Backlog
	BacklogReader      = outboxdriver.BacklogReader
	DeadSearcher       = outboxdriver.DeadSearcher
	DeadQuery          = outboxdriver.DeadQuery
	DeadCount          = outboxdriver.DeadCount
	TopicBacklogReader = outboxdriver.TopicBacklogReader
	TopicBacklog       = outboxdriver.TopicBacklog
	Streamer           = outboxdriver.Streamer
	IDClaimer          = outboxdriver.IDClaimer
	StreamLag          = outboxdriver.StreamLag
	StreamLagger       = outboxdriver.StreamLagger
	KeyOrderer         = outboxdriver.KeyOrderer
	HoldParams         = outboxdriver.HoldParams
	ClaimOverlap       = outboxdriver.ClaimOverlap
	ClaimOverlapper    = outboxdriver.ClaimOverlapper
	DueChecker         = outboxdriver.DueChecker
	Watcher            = outboxdriver.Watcher
	Change             = outboxdriver.Change
)

const (
	OverlapAll     = outboxdriver.OverlapAll
	OverlapPublish = outboxdriver.OverlapPublish
	OverlapNone    = outboxdriver.OverlapNone
)

var (
	ErrStreamUnavailable = outboxdriver.ErrStreamUnavailable
	ErrStreamBusy        = outboxdriver.ErrStreamBusy
	ValidateIdentifier   = outboxdriver.ValidateIdentifier
	SplitTableName       = outboxdriver.SplitTableName
)

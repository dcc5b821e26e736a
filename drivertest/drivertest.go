package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// Env is one test's view of a fresh database namespace.
type Env[TTx any] struct {
	// Driver works on the default tables, already migrated.
	Driver outboxdriver.Driver[TTx]
	// WithTables returns a driver on other table names in the same namespace,
	// not migrated.
	WithTables func(outbox.Tables) (outboxdriver.Driver[TTx], error)
	// Exec runs a statement outside any transaction; placeholders are '?'.
	Exec func(ctx context.Context, query string, args ...any) error
	// QueryInt runs a query that returns one integer; placeholders are '?'.
	QueryInt func(ctx context.Context, query string, args ...any) (int64, error)
	// Begin, Commit, Rollback and ExecTx handle the caller's own transactions.
	Begin    func(ctx context.Context) (TTx, error)
	Commit   func(ctx context.Context, tx TTx) error
	Rollback func(ctx context.Context, tx TTx) error
	ExecTx   func(ctx context.Context, tx TTx, query string, args ...any) error

	// ConcurrentWriters is true where two transactions can insert at once
	// (PostgreSQL, MySQL), false where writers take turns (SQLite).
	ConcurrentWriters bool
	// IdleInTxTimeout, where the database can end a session whose
	// transaction stays idle, returns a store on Driver's tables whose
	// connections the server ends once a transaction has been idle for d
	// (PostgreSQL's idle_in_transaction_session_timeout, MariaDB's
	// idle_transaction_timeout, set per connection), and ended, which
	// begins a transaction on such a connection, waits past d, and returns
	// nil only if the server ended it. Nil where the database has no such
	// setting (SQLite).
	IdleInTxTimeout func(t *testing.T, d time.Duration) (st outboxdriver.Store, ended func(context.Context) error)
	// IsUniqueViolation is the driver's predicate for a unique-key violation
	// (outboxpgx.IsUniqueViolation, ...), for the business-key strategy.
	IsUniqueViolation func(error) bool
}

// Setup makes a fresh Env for one test and registers its cleanup on t.
type Setup[TTx any] func(t *testing.T) *Env[TTx]

// Run runs the whole suite.
func Run[TTx any](t *testing.T, setup Setup[TTx]) {
	s := suite[TTx]{setup: setup}
	t.Run("Migrate", s.testMigrate)
	t.Run("Tables", s.testTables)
	t.Run("SchemaMissing", s.testSchemaMissing)
	t.Run("Writer", s.testWriter)
	t.Run("WriterValidation", s.testWriterValidation)
	t.Run("WriterDuplicate", s.testWriterDuplicate)
	t.Run("Sidecar", s.testSidecar)
	t.Run("ClaimPlan", s.testClaimPlan)
	t.Run("Relay", s.testRelay)
	t.Run("RelaySlowBroker", s.testRelaySlowBroker)
	t.Run("RelayFailures", s.testRelayFailures)
	t.Run("RelayUnavailable", s.testRelayUnavailable)
	t.Run("RelayDueBehindBackoff", s.testDueBehindBackoff)
	t.Run("RelayBackoffFromFailure", s.testBackoffFromFailure)
	t.Run("RelayErrorTextStored", s.testErrorTextStored)
	t.Run("RelayStopFinishesBatch", s.testRelayStop)
	t.Run("TwoRelays", s.testTwoRelays)
	t.Run("KeyOrder", s.testKeyOrder)
	t.Run("LateCommit", s.testLateCommit)
	t.Run("AnyDue", s.testAnyDue)
	t.Run("WriterBesideOpenClaims", s.testWriterBesideClaims)
	t.Run("CrashBetweenPublishAndMark", s.testCrash)
	t.Run("IdleInTransactionTimeout", s.testIdleInTxTimeout)
	t.Run("LeaseRunsOut", s.testLeaseRunsOut)
	t.Run("FailedFinishGivesUp", s.testFailedFinishGivesUp)
	t.Run("StatusSetBackByHand", s.testStatusSetBackByHand)
	t.Run("Inbox", s.testInbox)
	t.Run("InboxConcurrent", s.testInboxConcurrent)
	t.Run("Admin", s.testAdmin)
	t.Run("AdminHTTP", s.testAdminHTTP)
	t.Run("Backlog", s.testBacklog)
	t.Run("DeadRows", s.testDeadRows)
	t.Run("DeadSearch", s.testDeadSearch)
	t.Run("DeadSearchPlans", s.testDeadSearchPlans)
	t.Run("StatsPlans", s.testStatsPlans)
	t.Run("MigrateDeadIndex", s.testMigrateDeadIndex)
	t.Run("Cleanup", s.testCleanup)
	t.Run("Cleaner", s.testCleaner)
	t.Run("InboxCleanup", s.testInboxCleanup)
	t.Run("CleanupBesideWriters", s.testCleanupBesideWriters)
	t.Run("InboxHandler", s.testInboxHandler)
	t.Run("IdempotencyUniqueKey", s.testUniqueKey)
}

type suite[TTx any] struct {
	setup Setup[TTx]
}

package drivertest

import (
	"context"
	"testing"

	"github.com/outbox-go/outbox"
)

// Env is one test's view of a fresh database namespace.
type Env[TTx any] struct {
	// Driver works on the default tables, already migrated.
	Driver outbox.Driver[TTx]
	// WithTables returns a driver on other table names in the same namespace,
	// not migrated.
	WithTables func(outbox.Tables) (outbox.Driver[TTx], error)
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
	// LeasedClaims is true where a claim is held by a lease that runs out
	// (SQLite's claims table), false where it is held by an open transaction
	// that a crash rolls back (PostgreSQL, MySQL).
	LeasedClaims bool
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
	t.Run("LateCommit", s.testLateCommit)
	t.Run("WriterBesideOpenClaims", s.testWriterBesideClaims)
	t.Run("CrashBetweenPublishAndMark", s.testCrash)
	t.Run("Inbox", s.testInbox)
	t.Run("InboxConcurrent", s.testInboxConcurrent)
	t.Run("Admin", s.testAdmin)
	t.Run("AdminHTTP", s.testAdminHTTP)
	t.Run("Backlog", s.testBacklog)
	t.Run("DeadRows", s.testDeadRows)
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

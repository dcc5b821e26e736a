// Package sqlstore runs the outbox's SQL for every dialect on an abstract
// connection. Driver modules adapt their database library to DB and Querier and
// supply a Classifier for its error codes; everything else is shared, so every
// dialect behaves the same way and passes the same suite.
//
// Each dialect's SQL is a folder of embedded files, sql/<dialect>: one
// statement per file, named after its field of statements in snake case
// (claim_after.sql fills ClaimAfter), its contract in the "--" comment lines
// that head it. Table names are placeholders, {{outbox}}, {{inbox}},
// {{claims}} and the like, which the store replaces in every statement when
// it is created; {{ids}} stays, to be expanded per call. A fragment that
// several statements share is a partial, sql/<dialect>/_partials/<name>.sql,
// which a statement includes as {{> name}}, or as {{> name arg}} when the
// partial takes an argument, written {{arg}} in it. A partial may include
// another. A file that names no statement, a statement the dialect needs
// and lacks, an unknown partial and a placeholder left over are errors when
// the store is created. The migrations are files too, sql's sibling
// migrations/<dialect>.
package sqlstore

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// Rows is the part of a result set the store reads.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// Querier runs statements: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Tx is a transaction the store began itself.
type Tx interface {
	Querier
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// DB is a connection pool.
type DB interface {
	Querier
	Begin(ctx context.Context) (Tx, error)
}

// readCommittedDB is a DB that begins READ COMMITTED transactions, for the
// claims and cleanups of MySQL.
type readCommittedDB interface {
	BeginReadCommitted(ctx context.Context) (Tx, error)
}

// SetupBeginner is a DB that can begin a transaction and run setup
// statements (a dialect's claimSetup, no arguments) in one round trip, as
// pgx does with its BeginQuery. Without it the setup is a statement of its
// own.
type SetupBeginner interface {
	BeginWith(ctx context.Context, setup string) (Tx, error)
}

// TxPipeliner is a DB that can send a whole short transaction in one round
// trip, as pgx does with a batch: BEGIN, the setup statements, one query and
// COMMIT. scan reads the query's rows before the call returns; an error
// anywhere rolls the transaction back.
type TxPipeliner interface {
	QueryCommitted(ctx context.Context, setup []string, query string, args []any, scan func(Rows) error) error
}

// ErrorKind is what a database error means to the outbox.
type ErrorKind int

const (
	ErrOther ErrorKind = iota
	// ErrUnique is a unique-key violation.
	ErrUnique
	// ErrUndefinedTable is a missing table.
	ErrUndefinedTable
	// ErrConnection is a connection the server closed or lost: nothing
	// that was sent on it took effect unless it was committed.
	ErrConnection
	// ErrDuplicateColumn is an ALTER TABLE ... ADD COLUMN of a column, or
	// ADD INDEX of an index, that is there already.
	ErrDuplicateColumn
	// ErrUndefinedColumn is a missing column: tables of an older schema.
	ErrUndefinedColumn
	// ErrRejected is a value the database refused: a CHECK constraint
	// (MariaDB's json_valid, which allows 31 levels of nesting; SQLite's),
	// text the column's character set cannot hold, JSON its type refuses.
	ErrRejected
)

// Classifier translates a driver's error codes.
type Classifier func(error) ErrorKind

// Store implements outboxdriver.Store and the transactional calls of outboxdriver.Driver.
type Store struct {
	db       DB
	c        *compiled
	classify Classifier
	tables   outbox.Tables
	// ko is the SQL of the per-key hold-back (keyorder.go).
	ko keyOrderSQL
	// seqChecked: the id sequence's cache was found to be 1 (SeqCache).
	seqChecked atomic.Bool
	// probe is AnyDue's state (probe.go).
	probe prober
}

// New returns a Store for the named dialect ("postgres", "mysql", "sqlite").
func New(db DB, dialectName string, tables outbox.Tables, classify Classifier) (*Store, error) {
	_, c, tables, err := compileFor(dialectName, tables)
	if err != nil {
		return nil, err
	}
	if _, ok := db.(sessionDB); !ok && c.UnlockMigration != "" {
		return nil, fmt.Errorf("outbox: the %s dialect's migration lock belongs to a connection: its DB must be able to hold one (sqlstore.SQLDB)", dialectName)
	}
	return &Store{db: db, c: c, classify: classify, tables: tables, ko: c.ko}, nil
}

var _ outboxdriver.Store = (*Store)(nil)

// Dialect implements outboxdriver.Store.
func (s *Store) Dialect() string { return s.c.name }

// ClaimOverlap implements outboxdriver.ClaimOverlapper. PostgreSQL's and MySQL's
// claims commit at once and leave no lock behind, so Relay.Run may claim
// beside a mark. SQLite's claims and marks take the one write lock (and hold
// no connection in between), so a claim goes only beside a publish.
func (s *Store) ClaimOverlap() outboxdriver.ClaimOverlap { return s.c.claimer.overlap() }

// Tables implements outboxdriver.Store.
func (s *Store) Tables() outbox.Tables { return s.tables }

// wrap translates a database error at the boundary.
func (s *Store) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if s.classify != nil {
		switch s.classify(err) {
		case ErrUndefinedTable:
			return fmt.Errorf("outbox: %s: %w (table %q or %q: %w)", op, outbox.ErrSchemaMissing, s.tables.Outbox, s.tables.Inbox, err)
		case ErrUndefinedColumn:
			return fmt.Errorf("outbox: %s: %w (a column is missing from table %q: this build needs schema version %d): %w",
				op, outbox.ErrSchemaMissing, s.tables.Outbox, s.LatestVersion(), err)
		}
	}
	return fmt.Errorf("outbox: %s: %w", op, err)
}

package outboxpgx

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/sqlstore"
	"github.com/outbox-go/outbox/outboxdriver"
)

// Driver is an outboxdriver.Driver for pgx: the Writer and Inbox take a pgx.Tx.
type Driver struct {
	engine
	s    *sqlstore.Store
	pool *pgxpool.Pool

	notifyOnce sync.Once
	notify     *notifier

	// lag is the stream that runs now (Stream), for StreamLag.
	lagMu sync.Mutex
	lag   *pgStream
}

var _ outboxdriver.Driver[pgx.Tx] = (*Driver)(nil)

// engine gives this repository's own code the SQL engine under a driver
// (sqlstore.Of), out of the driver's godoc and method set.
type engine = sqlstore.Handle

// New returns a driver on pool. tables may be zero for the default names.
func New(pool *pgxpool.Pool, tables outbox.Tables) (*Driver, error) {
	if pool == nil {
		return nil, errors.New("outboxpgx: pool is nil")
	}
	s, err := sqlstore.New(poolDB{pool}, "postgres", tables, classify)
	if err != nil {
		return nil, err
	}
	return &Driver{engine: sqlstore.HandleOf(s), s: s, pool: pool}, nil
}

// NewStdlib returns a driver on a *sql.DB opened with pgx's stdlib
// ("pgx" driver name): the Writer and Inbox take a *sql.Tx.
func NewStdlib(db *sql.DB, tables outbox.Tables) (*StdlibDriver, error) {
	d, err := sqlstore.NewSQLDriver(db, "postgres", tables, classify)
	if err != nil {
		return nil, err
	}
	return &StdlibDriver{engine: sqlstore.HandleOfSQL(d), sql: d}, nil
}

// StdlibDriver is an outboxdriver.Driver on a *sql.DB opened with pgx's stdlib: the
// Writer and Inbox take the caller's *sql.Tx.
type StdlibDriver struct {
	engine
	sql *sqlstore.SQLDriver

	notifyOnce sync.Once
	notify     *notifier
}

var _ outboxdriver.Driver[*sql.Tx] = (*StdlibDriver)(nil)

// Pool returns the pool the driver runs on.
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// InsertTx implements outboxdriver.Driver.
func (d *Driver) InsertTx(ctx context.Context, tx pgx.Tx, msgs []outbox.Message) error {
	return d.s.InsertTx(ctx, txQuerier{tx}, msgs)
}

// MarkConsumedTx implements outboxdriver.Driver. An error that means the server
// cannot be reached satisfies outbox.IsUnavailable.
func (d *Driver) MarkConsumedTx(ctx context.Context, tx pgx.Tx, group, msgID string) (bool, error) {
	fresh, err := d.s.MarkConsumedTx(ctx, txQuerier{tx}, group, msgID)
	return fresh, unavailable(err)
}

// RunInTx implements outboxdriver.Driver. An error that means the server cannot be
// reached (the pool cannot connect, the connection was refused, reset or
// terminated, the server is shutting down or starting) satisfies
// outbox.IsUnavailable, fn's own error included.
func (d *Driver) RunInTx(ctx context.Context, fn func(context.Context, pgx.Tx) error) error {
	return unavailable(pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error { return fn(ctx, tx) }))
}

// MarkConsumedTx implements outboxdriver.Driver, as Driver's does.
func (d *StdlibDriver) MarkConsumedTx(ctx context.Context, tx *sql.Tx, group, msgID string) (bool, error) {
	fresh, err := d.sql.MarkConsumedTx(ctx, tx, group, msgID)
	return fresh, unavailable(err)
}

// RunInTx implements outboxdriver.Driver, as Driver's does.
func (d *StdlibDriver) RunInTx(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	return unavailable(d.sql.RunInTx(ctx, fn))
}

// unavailable wraps err with outbox.DatabaseUnavailable when it means the
// server cannot be reached. A Permanent error stays as it is.
func unavailable(err error) error {
	if err == nil || outbox.IsPermanent(err) {
		return err
	}
	var ce *pgconn.ConnectError
	var ne *net.OpError
	switch {
	case errors.As(err, &ce), classify(err) == sqlstore.ErrConnection, errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		// The connection reset, cut or closed while a statement waited for
		// its answer.
		errors.As(err, &ne), errors.Is(err, pgconn.ErrConnClosed):
		return outbox.DatabaseUnavailable(err)
	}
	return err
}

// classify translates PostgreSQL error codes for the store.
func classify(err error) sqlstore.ErrorKind {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505":
			return sqlstore.ErrUnique
		case pe.Code == "42P01":
			return sqlstore.ErrUndefinedTable
		case pe.Code == "42703":
			return sqlstore.ErrUndefinedColumn
		// The data exceptions of a value the outbox columns refuse (bad
		// text representation, untranslatable character, character not in
		// repertoire, numeric overflow), and the outbox's own CHECK
		// constraints. The Writer's validation refuses what it knows of
		// before the INSERT, since either aborts the transaction. Not other
		// check violations (no partition for the row, a user's own
		// constraint) or data exceptions (a sequence at its limit).
		case pe.Code == "22P02" || pe.Code == "22P05" || pe.Code == "22021" || pe.Code == "22003",
			pe.Code == "23514" && (strings.HasSuffix(pe.ConstraintName, "_msg_id_check") || strings.HasSuffix(pe.ConstraintName, "_status_check")):
			return sqlstore.ErrRejected
		// The server ends the session: admin_shutdown (pg_terminate_backend,
		// a fast shutdown), crash_shutdown, cannot_connect_now, or a
		// connection exception (class 08).
		case pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || strings.HasPrefix(pe.Code, "08"):
			return sqlstore.ErrConnection
		}
		return sqlstore.ErrOther
	}
	if pgconn.SafeToRetry(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return sqlstore.ErrConnection
	}
	return sqlstore.ErrOther
}

type poolDB struct{ p *pgxpool.Pool }

func (d poolDB) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := d.p.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (d poolDB) Query(ctx context.Context, q string, args ...any) (sqlstore.Rows, error) {
	rows, err := d.p.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgxRows{rows}, nil
}

func (d poolDB) Begin(ctx context.Context) (sqlstore.Tx, error) {
	tx, err := d.p.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return txQuerier{tx}, nil
}

// BeginWith implements sqlstore.SetupBeginner: BEGIN and the setup go to the
// server as one simple-protocol query.
func (d poolDB) BeginWith(ctx context.Context, setup string) (sqlstore.Tx, error) {
	tx, err := d.p.BeginTx(ctx, pgx.TxOptions{BeginQuery: "BEGIN; " + setup})
	if err != nil {
		return nil, err
	}
	return txQuerier{tx}, nil
}

// QueryCommitted implements sqlstore.TxPipeliner: BEGIN, the setup, the
// query and COMMIT go to the server as one batch, in one round trip. A
// statement that fails leaves the connection in a failed transaction, which
// the pool closes when it gets it back.
func (d poolDB) QueryCommitted(ctx context.Context, setup []string, q string, args []any, scan func(sqlstore.Rows) error) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	for _, st := range setup {
		b.Queue(st)
	}
	b.Queue(q, args...)
	b.Queue("COMMIT")
	br := d.p.SendBatch(ctx, b)
	for range 1 + len(setup) {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return err
	}
	if err := scan(pgxRows{rows}); err != nil {
		br.Close()
		return err
	}
	tag, err := br.Exec()
	if err != nil {
		br.Close()
		return err
	}
	if tag.String() != "COMMIT" {
		br.Close()
		return fmt.Errorf("the transaction ended with %s, not COMMIT", tag)
	}
	return br.Close()
}

type txQuerier struct{ tx pgx.Tx }

func (t txQuerier) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

func (t txQuerier) Query(ctx context.Context, q string, args ...any) (sqlstore.Rows, error) {
	rows, err := t.tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgxRows{rows}, nil
}

func (t txQuerier) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t txQuerier) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error { r.Rows.Close(); return r.Err() }

// IsUniqueViolation reports whether err is PostgreSQL's unique_violation
// (23505): for outbox.UniqueKey, the business-key idempotency strategy.
func IsUniqueViolation(err error) bool { return classify(err) == sqlstore.ErrUnique }

// QueueWrite runs w's write hooks over m and validates it (w.Prepare), then
// queues its insert in batch, so that it travels with the caller's own
// statements in one round trip when the caller sends the batch in its
// transaction (tx.SendBatch): the outbox then costs the transaction no round
// trip of its own. A hook's error, or a message w refuses, comes back at
// once, with nothing queued.
//
// A msg_id already in the table fails the queued insert, and with it the
// transaction, as any failing statement of a batch does: the business change
// queued beside it cannot commit without its message. However the batch's
// results are read, the failure shows: BatchResults.Close returns a
// *outbox.DuplicateError (errors.Is outbox.ErrDuplicate), and
// BatchResults.Exec, read statement by statement, PostgreSQL's
// unique_violation (IsUniqueViolation). Roll back; the event was already
// recorded. (Write, by contrast, leaves the transaction usable after a
// duplicate: it can afford the round trip that tells.)
func (d *Driver) QueueWrite(ctx context.Context, w *outbox.Writer[pgx.Tx], batch *pgx.Batch, m outbox.Message) error {
	msgs, err := w.Prepare(ctx, m)
	if err != nil {
		return err
	}
	m = msgs[0]
	// The strict insert has no ON CONFLICT: an insert that skipped a
	// duplicate would report it only through its row count, which a caller
	// reading the results with BatchResults.Exec never sees, and the
	// business change would commit without its message.
	stmt, args, err := d.s.InsertOneStrict(&m)
	if err != nil {
		return err
	}
	msgID := m.MsgID
	batch.Queue(stmt, args...).Fn = func(br pgx.BatchResults) error {
		_, err := br.Exec()
		if err != nil && classify(err) == sqlstore.ErrUnique {
			return &outbox.DuplicateError{MsgIDs: []string{msgID}}
		}
		return err
	}
	return nil
}

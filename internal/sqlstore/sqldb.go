package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// SQLDB adapts a *sql.DB to DB.
func SQLDB(db *sql.DB) DB { return sqlDB{sqlQueries[*sql.DB]{db}} }

// SQLTx adapts a caller's *sql.Tx to Querier.
func SQLTx(tx *sql.Tx) Querier { return sqlTx{sqlQueries[*sql.Tx]{tx}} }

// sqlQueries is Querier for what *sql.DB, *sql.Conn and *sql.Tx share. It
// holds one pointer, so that wrapping one in an interface allocates nothing.
type sqlQueries[T interface {
	*sql.DB | *sql.Conn | *sql.Tx
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}] struct{ r T }

func (q sqlQueries[T]) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return execResult(q.r.ExecContext(ctx, query, args...))
}

func (q sqlQueries[T]) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	return q.r.QueryContext(ctx, query, args...) //nolint:rowserrcheck // the caller iterates and checks Err
}

// beginOn begins a transaction on a *sql.DB or a *sql.Conn.
func beginOn(ctx context.Context, b interface {
	BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
}, opts *sql.TxOptions,
) (Tx, error) {
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return sqlTx{sqlQueries[*sql.Tx]{tx}}, nil
}

type sqlDB struct{ sqlQueries[*sql.DB] }

func (d sqlDB) Begin(ctx context.Context) (Tx, error) { return beginOn(ctx, d.r, nil) }

// BeginReadCommitted implements readCommittedDB.
func (d sqlDB) BeginReadCommitted(ctx context.Context) (Tx, error) {
	return beginOn(ctx, d.r, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
}

type sqlTx struct{ sqlQueries[*sql.Tx] }

func (t sqlTx) Commit(context.Context) error { return t.r.Commit() }

func (t sqlTx) Rollback(context.Context) error {
	err := t.r.Rollback()
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

func execResult(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// SQLDriver is an outboxdriver.Driver for database/sql, shared by the driver modules
// whose library plugs into database/sql.
type SQLDriver struct {
	*Store
	db *sql.DB
}

// NewSQLDriver returns a Driver on db for the named dialect.
func NewSQLDriver(db *sql.DB, dialectName string, tables outbox.Tables, classify Classifier) (*SQLDriver, error) {
	if db == nil {
		return nil, fmt.Errorf("outbox: %s driver: db is nil", dialectName)
	}
	s, err := New(SQLDB(db), dialectName, tables, classify)
	if err != nil {
		return nil, err
	}
	return &SQLDriver{Store: s, db: db}, nil
}

var _ outboxdriver.Driver[*sql.Tx] = (*SQLDriver)(nil)

// InsertTx implements outboxdriver.Driver.
func (d *SQLDriver) InsertTx(ctx context.Context, tx *sql.Tx, msgs []outbox.Message) error {
	return d.Store.InsertTx(ctx, SQLTx(tx), msgs)
}

// MarkConsumedTx implements outboxdriver.Driver.
func (d *SQLDriver) MarkConsumedTx(ctx context.Context, tx *sql.Tx, group, msgID string) (bool, error) {
	return d.Store.MarkConsumedTx(ctx, SQLTx(tx), group, msgID)
}

// RunInTx implements outboxdriver.Driver.
func (d *SQLDriver) RunInTx(ctx context.Context, fn func(context.Context, *sql.Tx) error) (err error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return d.wrap("begin", err)
	}
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback()
			panic(p)
		}
	}()
	if err := fn(ctx, tx); err != nil {
		tx.Rollback()
		return err
	}
	return d.wrap("commit", tx.Commit())
}

// SQLDB returns the *sql.DB the driver runs on.
func (d *SQLDriver) SQLDB() *sql.DB { return d.db }

// Session implements sessionDB: one connection of the pool, held until
// Close or Discard.
func (d sqlDB) Session(ctx context.Context) (session, error) {
	c, err := d.r.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return sqlConn{sqlQueries[*sql.Conn]{c}}, nil
}

type sqlConn struct{ sqlQueries[*sql.Conn] }

// Begin begins a transaction on the held connection. When ctx ends,
// database/sql rolls the transaction back, and the connection stays held.
func (c sqlConn) Begin(ctx context.Context) (Tx, error) { return beginOn(ctx, c.r, nil) }

func (c sqlConn) Close() error { return c.r.Close() }

// Discard closes the connection: database/sql drops a connection for which
// Raw reports driver.ErrBadConn.
func (c sqlConn) Discard() error {
	_ = c.r.Raw(func(any) error { return driver.ErrBadConn })
	return c.r.Close()
}

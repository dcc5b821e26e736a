package outboxsqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/sqlstore"
	"github.com/outbox-go/outbox/outboxdriver"
)

// New returns a driver on db, which must be opened with the "sqlite" driver of
// modernc.org/sqlite. Open does that with the settings the outbox wants.
func New(db *sql.DB, tables outbox.Tables) (*Driver, error) {
	d, err := sqlstore.NewSQLDriver(db, "sqlite", tables, classify)
	if err != nil {
		return nil, err
	}
	return &Driver{engine: sqlstore.HandleOfSQL(d), sql: d}, nil
}

// Driver is an outboxdriver.Driver on a *sql.DB: the Writer and Inbox take the
// caller's *sql.Tx.
type Driver struct {
	engine
	sql *sqlstore.SQLDriver
}

// engine gives this repository's own code the SQL engine under a driver
// (sqlstore.Of), out of the driver's godoc and method set.
type engine = sqlstore.Handle

var _ outboxdriver.Driver[*sql.Tx] = (*Driver)(nil)

// Open opens the SQLite file at path for the outbox: WAL journal, NORMAL
// synchronous (durable at each checkpoint, safe against corruption), a busy
// timeout of 10 seconds, foreign keys on, and IMMEDIATE transactions so that
// two writers wait for each other instead of failing with SQLITE_BUSY.
//
// It also lets the WAL grow to 10,000 pages (about 40 MB) before a checkpoint,
// instead of SQLite's 1,000: the relay rewrites the same pages at the head of
// the table batch after batch, and a larger window copies each back once
// rather than many times.
//
// The writers of the file in this process queue at a write gate before they
// take SQLite's write lock; see [WriteGate], which turns it off. Every *sql.DB
// that Open opens on one path shares its gate. With the gate on, the
// checkpoints run on a connection of their own in the background, so that no
// writer or relay waits while one copies and syncs; a writer that finds the
// WAL at 20,000 pages checkpoints itself, after any checkpoint under way.
//
// A file that does not exist is created with mode 0600 (owner read and
// write), and SQLite gives its -wal and -shm files the mode of the database
// file: messages are business data. The mode of a file that exists is left
// as it is; chmod it to share it with another user on purpose.
func Open(path string, opts ...OpenOption) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("outboxsqlite: empty file path")
	}
	o := openOptions{writeGate: true}
	for _, opt := range opts {
		opt(&o)
	}
	key := ""
	if o.writeGate {
		key = gateKey(path)
	}
	autoCheckpoint := autoCheckpointPages
	if key != "" {
		autoCheckpoint = 0 // the gated connections checkpoint themselves, outside the gate
	}
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "synchronous(NORMAL)", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()), "foreign_keys(ON)", fmt.Sprintf("wal_autocheckpoint(%d)", autoCheckpoint)} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	dsn := "file:" + path + "?" + q.Encode()
	if strings.Contains(path, "?") {
		return nil, fmt.Errorf("outboxsqlite: path %q must not contain '?'", path)
	}
	if err := createPrivate(path); err != nil {
		return nil, err
	}
	if key == "" {
		return sql.Open("sqlite", dsn)
	}
	c, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(&gatedConnector{Connector: c, gate: openGate(key), cp: newCheckpointer(c.Connect)}), nil
}

// createPrivate creates the database file at path with mode 0600 when it
// does not exist, before SQLite would create it with 0644. SQLite takes an
// empty file for an empty database. An in-memory database has no file; a
// file that exists is left alone; a directory that does not exist is left
// for SQLite to report when the database is first used, as it does for a
// file it cannot open.
func createPrivate(path string) error {
	if path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		return f.Close()
	case errors.Is(err, fs.ErrExist), errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return nil
	}
	return fmt.Errorf("outboxsqlite: create %q: %w", path, err)
}

// classify translates SQLite result codes for the store.
func classify(err error) sqlstore.ErrorKind {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return sqlstore.ErrUnique
		case sqlite3.SQLITE_CONSTRAINT_CHECK:
			return sqlstore.ErrRejected
		}
		if strings.Contains(se.Error(), "no such table") {
			return sqlstore.ErrUndefinedTable
		}
		if strings.Contains(se.Error(), "no such column") {
			return sqlstore.ErrUndefinedColumn
		}
	}
	return sqlstore.ErrOther
}

// MarkConsumedTx implements outboxdriver.Driver. An error that means the
// database cannot be used for now satisfies outbox.IsUnavailable.
func (d *Driver) MarkConsumedTx(ctx context.Context, tx *sql.Tx, group, msgID string) (bool, error) {
	fresh, err := d.sql.MarkConsumedTx(ctx, tx, group, msgID)
	return fresh, unavailable(err)
}

// RunInTx implements outboxdriver.Driver. An error that means the database cannot
// be used for now (the file cannot be opened, an I/O error, the disk full,
// the database locked by another writer beyond the busy timeout) satisfies
// outbox.IsUnavailable, fn's own error included.
//
// After a commit it wakes the relays of this process that watch the
// *sql.DB (Notify).
func (d *Driver) RunInTx(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	err := d.sql.RunInTx(ctx, fn)
	if err == nil {
		d.Notify()
	}
	return unavailable(err)
}

// unavailable wraps err with outbox.DatabaseUnavailable when it means the
// database cannot be used for now. A Permanent error stays as it is.
func unavailable(err error) error {
	if err == nil || outbox.IsPermanent(err) {
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // the primary result code
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return outbox.DatabaseUnavailable(err)
		}
	}
	if errors.Is(err, sql.ErrConnDone) || errors.Is(err, driver.ErrBadConn) {
		return outbox.DatabaseUnavailable(err)
	}
	return err
}

// IsUniqueViolation reports whether err is a SQLite UNIQUE or PRIMARY KEY
// constraint failure: for outbox.UniqueKey, the business-key idempotency
// strategy.
func IsUniqueViolation(err error) bool { return classify(err) == sqlstore.ErrUnique }

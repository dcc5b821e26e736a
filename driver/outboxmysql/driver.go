package outboxmysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/sqlstore"
	"github.com/outbox-go/outbox/outboxdriver"
)

// New returns a driver on db, opened with the "mysql" driver. The DSN should set
// parseTime=true; interpolateParams=true saves a round trip per statement.
func New(db *sql.DB, tables outbox.Tables) (*Driver, error) {
	d, err := sqlstore.NewSQLDriver(db, "mysql", tables, classify)
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

// classify translates MySQL error numbers for the store.
func classify(err error) sqlstore.ErrorKind {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1062: // ER_DUP_ENTRY
			return sqlstore.ErrUnique
		case 1146: // ER_NO_SUCH_TABLE
			return sqlstore.ErrUndefinedTable
		case 1060, 1061: // ER_DUP_FIELDNAME, ER_DUP_KEYNAME
			return sqlstore.ErrDuplicateColumn
		case 1054: // ER_BAD_FIELD_ERROR
			return sqlstore.ErrUndefinedColumn
		// MariaDB's ER_CONSTRAINT_FAILED (its JSON columns are a CHECK of
		// json_valid), MySQL's ER_CHECK_CONSTRAINT_VIOLATED and
		// ER_INVALID_JSON_TEXT, and text the character set cannot hold
		// (ER_TRUNCATED_WRONG_VALUE_FOR_FIELD).
		case 4025, 3819, 3140, 1366:
			return sqlstore.ErrRejected
		}
	}
	// database/sql itself retries driver.ErrBadConn on a fresh connection;
	// a connection that died mid-exchange reports ErrInvalidConn.
	if errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) {
		return sqlstore.ErrConnection
	}
	return sqlstore.ErrOther
}

// MarkConsumedTx implements outboxdriver.Driver. An error that means the server
// cannot be reached satisfies outbox.IsUnavailable.
func (d *Driver) MarkConsumedTx(ctx context.Context, tx *sql.Tx, group, msgID string) (bool, error) {
	fresh, err := d.sql.MarkConsumedTx(ctx, tx, group, msgID)
	return fresh, unavailable(err)
}

// RunInTx implements outboxdriver.Driver. An error that means the server cannot be
// reached (connection refused, reset or killed, the server shutting down,
// too many connections) satisfies outbox.IsUnavailable, fn's own error
// included.
func (d *Driver) RunInTx(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	return unavailable(d.sql.RunInTx(ctx, fn))
}

// unavailable wraps err with outbox.DatabaseUnavailable when it means the
// server cannot be reached. A Permanent error stays as it is.
func unavailable(err error) error {
	if err == nil || outbox.IsPermanent(err) {
		return err
	}
	var me *mysql.MySQLError
	var ne *net.OpError
	switch {
	case classify(err) == sqlstore.ErrConnection, errors.Is(err, sql.ErrConnDone), errors.As(err, &ne):
	case errors.As(err, &me) && (me.Number == 1040 || // ER_CON_COUNT_ERROR: too many connections
		me.Number == 1053 || // ER_SERVER_SHUTDOWN
		me.Number == 1927): // MariaDB's ER_CONNECTION_KILLED
	default:
		return err
	}
	return outbox.DatabaseUnavailable(err)
}

// IsUniqueViolation reports whether err is MySQL's ER_DUP_ENTRY (1062): for
// outbox.UniqueKey, the business-key idempotency strategy.
func IsUniqueViolation(err error) bool { return classify(err) == sqlstore.ErrUnique }

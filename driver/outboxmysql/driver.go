package outboxmysql

import (
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/sqlstore"
)

// New returns a driver on db, opened with the "mysql" driver. The DSN should set
// parseTime=true; interpolateParams=true saves a round trip per statement.
func New(db *sql.DB, tables outbox.Tables) (*Driver, error) {
	d, err := sqlstore.NewSQLDriver(db, "mysql", tables, classify)
	if err != nil {
		return nil, err
	}
	return &Driver{d}, nil
}

// Driver is an outbox.Driver on a *sql.DB: the Writer and Inbox take the
// caller's *sql.Tx. Its methods are the outbox.Driver and outbox.Store calls.
type Driver struct {
	*sqlstore.SQLDriver
}

var _ outbox.Driver[*sql.Tx] = (*Driver)(nil)

// classify translates MySQL error numbers for the store.
func classify(err error) sqlstore.ErrorKind {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1062: // ER_DUP_ENTRY
			return sqlstore.ErrUnique
		case 1146: // ER_NO_SUCH_TABLE
			return sqlstore.ErrUndefinedTable
		case 1060: // ER_DUP_FIELDNAME
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

// IsUniqueViolation reports whether err is MySQL's ER_DUP_ENTRY (1062): for
// outbox.UniqueKey, the business-key idempotency strategy.
func IsUniqueViolation(err error) bool { return classify(err) == sqlstore.ErrUnique }

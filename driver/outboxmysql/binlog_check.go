package outboxmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox/outboxdriver"
)

// unavailableError is the error of a reader that the server's settings or
// the user's privileges do not allow: it matches outboxdriver.ErrStreamUnavailable.
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string {
	return "outboxmysql: binlog stream unavailable: " + e.msg
}

func (e *unavailableError) Is(target error) bool { return target == outboxdriver.ErrStreamUnavailable }

func unavailablef(format string, args ...any) error {
	return &unavailableError{msg: fmt.Sprintf(format, args...)}
}

// server is what a reader learned of the server before it starts.
type server struct {
	mariadb      bool
	major, minor int
	serverID     uint32
	user         string // CURRENT_USER() as 'name'@'host'
	pos          BinlogPosition
}

// check reads the server's binary log settings and position, and returns
// an unavailableError that says what to change when they do not allow a
// reader.
func (b *BinlogDriver) check(ctx context.Context) (server, error) {
	var s server
	var version, logBin, format, image, user string
	err := b.db.QueryRowContext(ctx, "SELECT VERSION(), @@GLOBAL.log_bin, @@GLOBAL.binlog_format, @@GLOBAL.binlog_row_image, @@GLOBAL.server_id, CURRENT_USER()").
		Scan(&version, &logBin, &format, &image, &s.serverID, &user)
	if err != nil {
		return s, fmt.Errorf("outboxmysql: binlog: read the server's settings: %w", err)
	}
	s.mariadb = strings.Contains(version, "MariaDB")
	_, _ = fmt.Sscanf(version, "%d.%d", &s.major, &s.minor)
	s.user = quoteUser(user)
	switch {
	case logBin != "1" && !strings.EqualFold(logBin, "ON"):
		return s, unavailablef("the server does not write a binary log (log_bin is OFF): start it with log_bin (--log-bin), binlog_format=ROW and binlog_row_image=FULL")
	case !strings.EqualFold(format, "ROW"):
		return s, unavailablef("binlog_format is %s: set binlog_format=ROW (in the server's configuration, and SET GLOBAL binlog_format=ROW for new sessions)", format)
	case !strings.EqualFold(image, "FULL"):
		return s, unavailablef("binlog_row_image is %s: set binlog_row_image=FULL (in the server's configuration, and SET GLOBAL binlog_row_image=FULL for new sessions)", image)
	}
	s.pos, err = b.serverPositionAs(ctx, s)
	return s, err
}

// quoteUser turns CURRENT_USER()'s name@host into 'name'@'host'.
func quoteUser(u string) string {
	name, host, ok := strings.Cut(u, "@")
	if !ok {
		return u
	}
	return "'" + name + "'@'" + host + "'"
}

// monitorPrivilege names the privilege that SHOW MASTER STATUS needs.
func (s server) monitorPrivilege() string {
	if s.mariadb {
		return "BINLOG MONITOR"
	}
	return "REPLICATION CLIENT"
}

// grants is the GRANT statement that gives s.user what a reader needs.
func (s server) grants() string {
	return fmt.Sprintf("GRANT REPLICATION SLAVE, %s ON *.* TO %s", s.monitorPrivilege(), s.user)
}

func (b *BinlogDriver) serverPosition(ctx context.Context) (BinlogPosition, error) {
	s, err := b.check(ctx)
	return s.pos, err
}

// serverPositionAs reads the server's current position: SHOW MASTER STATUS,
// which MySQL 8.4 renamed SHOW BINARY LOG STATUS.
func (b *BinlogDriver) serverPositionAs(ctx context.Context, s server) (BinlogPosition, error) {
	var p BinlogPosition
	rows, err := b.db.QueryContext(ctx, "SHOW MASTER STATUS")
	if isErrNumber(err, 1064) { // ER_PARSE_ERROR: MySQL 8.4 and later
		rows, err = b.db.QueryContext(ctx, "SHOW BINARY LOG STATUS")
	}
	if err != nil {
		if isErrNumber(err, 1227) { // ER_SPECIFIC_ACCESS_DENIED_ERROR
			return p, unavailablef("%s lacks %s (SHOW MASTER STATUS refused: %v): %s", s.user, s.monitorPrivilege(), err, s.grants())
		}
		return p, fmt.Errorf("outboxmysql: binlog: read the server's position: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return p, err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return p, err
		}
		return p, unavailablef("the server reports no binary log position (SHOW MASTER STATUS is empty): start it with log_bin")
	}
	vals := make([]any, len(cols))
	vals[0], vals[1] = &p.File, &p.Offset
	for i := 2; i < len(vals); i++ {
		vals[i] = new(sql.RawBytes)
	}
	if err := rows.Scan(vals...); err != nil {
		return p, err
	}
	return p, rows.Err()
}

// BinlogLag returns how many bytes of the server's binary log the
// confirmed position (see Confirmed) is behind its current position: the
// transactions the stream has yet to hand over, and those of other tables
// it has yet to pass. It is 0 before the first Stream started. It reads
// SHOW MASTER STATUS, and SHOW BINARY LOGS when the two are in different
// files.
func (b *BinlogDriver) BinlogLag(ctx context.Context) (int64, error) {
	conf := b.Confirmed()
	if conf.IsZero() {
		return 0, nil
	}
	cur, err := b.serverPosition(ctx)
	if err != nil {
		return 0, err
	}
	if cur.File == conf.File {
		return max(0, int64(cur.Offset)-int64(conf.Offset)), nil
	}
	rows, err := b.db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return 0, fmt.Errorf("outboxmysql: binlog lag: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	var lag int64
	seen := false
	for rows.Next() {
		var name string
		var size int64
		vals := make([]any, len(cols))
		vals[0], vals[1] = &name, &size
		for i := 2; i < len(vals); i++ {
			vals[i] = new(sql.RawBytes)
		}
		if err := rows.Scan(vals...); err != nil {
			return 0, err
		}
		switch {
		case name == conf.File:
			seen = true
			lag += max(0, size-int64(conf.Offset))
		case name == cur.File:
			return lag + int64(cur.Offset), rows.Err()
		case seen:
			lag += size
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("outboxmysql: binlog lag: the confirmed position %s is not in the server's binary logs (purged?)", conf)
}

// isErrNumber reports whether err is the server's error number n, from
// either client.
func isErrNumber(err error, n uint16) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == n
	}
	var ge *gomysql.MyError
	if errors.As(err, &ge) {
		return ge.Code == n
	}
	return false
}

package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"strings"

	"github.com/jackc/pgx/v5"
)

// benchMsgIDPrefix starts the msg_id of every row outbox bench writes, so
// that bench can tell a table of its own from one that holds anybody else's
// rows before it empties it.
const benchMsgIDPrefix = "outbox-bench-"

// legacyBenchMsgIDs is a LIKE pattern for the msg_ids of the relay bench
// before benchMsgIDPrefix (8 hex digits, a dash, the run), all of topic
// benchTopic: a table such a bench left is still bench's own.
const legacyBenchMsgIDs = "________-%"

// benchTableStatements is the SQL with which bench looks at its tables
// before it empties them; {{table}} is a validated table name, quoted by
// the dialect (quote).
type benchTableStatements struct {
	quote func(name string) string
	// exists answers one boolean: whether the table named by the argument exists.
	exists string
	// foreign answers msg_id and topic of one row of the outbox table bench
	// did not write, if any; its arguments are benchMsgIDPrefix+"%",
	// benchTopic and legacyBenchMsgIDs.
	foreign string
	// inbox answers consumer_group and msg_id of one row of the inbox table,
	// where the store's Truncate empties that table too (PostgreSQL's is
	// TRUNCATE outbox, inbox); bench writes no row there.
	inbox string
}

var benchTableSQL = map[string]benchTableStatements{
	"postgres": {
		quote:   func(name string) string { return pgx.Identifier{name}.Sanitize() },
		exists:  `SELECT to_regclass($1) IS NOT NULL`,
		foreign: `SELECT msg_id, topic FROM {{table}} WHERE NOT (msg_id LIKE $1 OR (topic = $2 AND msg_id LIKE $3)) LIMIT 1`,
		inbox:   `SELECT consumer_group, msg_id FROM {{table}} LIMIT 1`,
	},
	"mysql": {
		quote:   func(name string) string { return "`" + name + "`" },
		exists:  `SELECT count(*) > 0 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`,
		foreign: `SELECT msg_id, topic FROM {{table}} WHERE NOT (msg_id LIKE ? OR (topic = ? AND msg_id LIKE ?)) LIMIT 1`,
	},
	"sqlite": {
		quote:   func(name string) string { return `"` + name + `"` },
		exists:  `SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?`,
		foreign: `SELECT msg_id, topic FROM {{table}} WHERE NOT (msg_id LIKE ? OR (topic = ? AND msg_id LIKE ?)) LIMIT 1`,
	},
}

// checkBenchTables refuses tables that hold rows bench did not write, as
// bench empties them before its first run: a relay's table given by mistake
// would lose its messages. A table a previous bench left is accepted.
func checkBenchTables(ctx context.Context, db *dbopen.Database, hint string) error {
	stmts, ok := benchTableSQL[db.Dialect]
	if !ok {
		return errors.New("bench: no check of the tables for dialect " + db.Dialect)
	}
	t := db.Store.Tables()
	var msgID, topic string
	found, err := stmts.query(ctx, db, stmts.foreign, t.Outbox, []any{benchMsgIDPrefix + "%", benchTopic, legacyBenchMsgIDs}, &msgID, &topic)
	if err != nil {
		return fmt.Errorf("bench: read table %q in %s: %w", t.Outbox, db.Where, err)
	}
	if found {
		return cli.Usagef(hint, "bench: table %q holds rows bench did not write (msg_id %q, topic %q), and bench empties its table before the first run; "+
			"give --table a table of bench's own (the default is outbox_bench), or add --force to empty this one anyway", t.Outbox, msgID, topic)
	}
	if stmts.inbox == "" {
		return nil
	}
	var group string
	found, err = stmts.query(ctx, db, stmts.inbox, t.Inbox, nil, &group, &msgID)
	if err != nil {
		return fmt.Errorf("bench: read table %q in %s: %w", t.Inbox, db.Where, err)
	}
	if found {
		return cli.Usagef(hint, "bench: table %q holds rows bench did not write (consumer group %q, msg_id %q), and on %s bench empties --inbox-table with its table; "+
			"give --inbox-table a table of bench's own (the default is outbox_bench_inbox), or add --force to empty this one anyway", t.Inbox, group, msgID, db.Dialect)
	}
	return nil
}

// query runs q on table with args and scans its first row into dest; found
// is false when the table or the row does not exist.
func (s benchTableStatements) query(ctx context.Context, db *dbopen.Database, q, table string, args []any, dest ...any) (found bool, err error) {
	var exists bool
	if _, err := queryOne(ctx, db, s.exists, []any{table}, &exists); err != nil || !exists {
		return false, err
	}
	return queryOne(ctx, db, strings.ReplaceAll(q, "{{table}}", s.quote(table)), args, dest...)
}

// queryOne runs q and scans its first row into dest; found is false when
// there is none.
func queryOne(ctx context.Context, db *dbopen.Database, q string, args []any, dest ...any) (found bool, err error) {
	if db.PG != nil {
		err = db.PG.Pool().QueryRow(ctx, q, args...).Scan(dest...)
	} else {
		err = db.SQL.SQLDB().QueryRowContext(ctx, q, args...).Scan(dest...)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

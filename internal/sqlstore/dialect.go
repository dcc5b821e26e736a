package sqlstore

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

//go:embed migrations
var migrationFS embed.FS

// dialect is what sets one database apart besides its SQL, which its folder
// sql/<name> holds (see statements).
type dialect struct {
	name  string
	quote func(string) string
	// claims is the dialect's claim design (see claimer).
	claims claimDesign

	// claimReturnsDue: the claim returns a ninth column, the row's
	// next_retry_at (PostgreSQL).
	claimReturnsDue bool
	// idList: MarkOthers and MarkLock name their rows in {{ids}}, one
	// placeholder per id, after their other arguments (see withIDs).
	idList bool
	// noSchemas: a table's name takes no schema (SQLite).
	noSchemas bool
	// readCommitted: the cleanups' DELETEs run at READ COMMITTED where the
	// DB can begin such a transaction (InnoDB; see Store.execCleanup).
	readCommitted bool
}

// compiled is a dialect with table names substituted.
type compiled struct {
	dialect
	statements
	// claimer is the dialect's claim design, with its statements.
	claimer claimer
	// ko is the SQL of the per-key hold-back (keyorder.go).
	ko keyOrderSQL
	// parts are the dialect's partials (sql/<name>/_partials), with table
	// names substituted, for the statements built in Go.
	parts      map[string]string
	migrations []migration
}

type migration struct {
	version    int
	name       string
	statements []string
}

// compile reads the dialect's SQL and substitutes the table names of t into
// every statement, partial and migration.
func (d dialect) compile(t outbox.Tables) (*compiled, error) {
	r := strings.NewReplacer(d.names(t)...)
	c := &compiled{dialect: d}
	src, err := loadSQL(d, &c.statements, &c.ko)
	if err != nil {
		return nil, err
	}
	if err := substitute(r, &c.statements, d.name); err != nil {
		return nil, err
	}
	c.claimer = d.claims.build(&c.statements)
	if err := substitute(r, &c.ko, d.name+" keyorder"); err != nil {
		return nil, err
	}
	if c.parts, err = src.expandedPartials(r); err != nil {
		return nil, err
	}
	dir := "migrations/" + d.name
	entries, err := fs.ReadDir(migrationFS, dir)
	if err != nil {
		return nil, fmt.Errorf("outbox: no migrations for dialect %s: %w", d.name, err)
	}
	for _, e := range entries {
		name := e.Name()
		v, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("outbox: migration file %s has no version prefix", name)
		}
		body, err := fs.ReadFile(migrationFS, dir+"/"+name)
		if err != nil {
			return nil, err
		}
		sql := r.Replace(string(body))
		if i := strings.Index(sql, "{{"); i >= 0 {
			return nil, fmt.Errorf("outbox: migration %s: unknown placeholder at %q", name, sql[i:min(len(sql), i+40)])
		}
		c.migrations = append(c.migrations, migration{version: v, name: strings.TrimSuffix(name, ".sql"),
			statements: splitStatements(sql)})
	}
	sort.Slice(c.migrations, func(i, j int) bool { return c.migrations[i].version < c.migrations[j].version })
	return c, nil
}

// names are the replacements of the placeholders for t, quoted, as
// strings.NewReplacer takes them. A table or a function that the outbox
// table brings with it goes into the outbox table's schema, and its name is
// qualified by that schema when the outbox table's is: {{migrations}},
// {{claims}}, {{horizon}}, the trigger functions {{outbox_dead_at_fn}} and
// {{outbox_requeue_fn}}, and {{outbox_pending_idx_qualified}} for a DROP
// INDEX. The name of an index, a constraint or a trigger, which the
// database always puts beside its table, is the bare one: CREATE INDEX,
// CONSTRAINT and CREATE TRIGGER take no schema.
func (d dialect) names(t outbox.Tables) []string {
	schema, table, _ := outboxdriver.SplitTableName(t.Outbox)
	inSchema := func(suffix string) string {
		if schema == "" {
			return d.quote(table + suffix)
		}
		return d.quote(schema) + "." + d.quote(table+suffix)
	}
	bare := func(suffix string) string { return d.quote(table + suffix) }
	return []string{
		"{{outbox}}", d.qualified(t.Outbox),
		"{{inbox}}", d.qualified(t.Inbox),
		"{{migrations}}", inSchema("_migrations"),
		"{{claims}}", inSchema("_claims"),
		"{{horizon}}", inSchema("_horizon"),
		"{{outbox_dead_at_fn}}", inSchema("_dead_at"),
		"{{outbox_requeue_fn}}", inSchema("_requeue"),
		"{{outbox_pending_idx_qualified}}", inSchema("_pending_idx"),
		"{{claims_token_idx}}", bare("_claims_token_idx"),
		"{{outbox_msg_id_key}}", bare("_msg_id_key"),
		"{{outbox_pending_idx}}", bare("_pending_idx"),
		"{{outbox_requeued_idx}}", bare("_requeued_idx"),
		"{{outbox_dead_idx}}", bare("_dead_idx"),
		"{{outbox_key_idx}}", bare("_key_idx"),
		"{{outbox_requeued_key_idx}}", bare("_requeued_key_idx"),
		"{{outbox_dead_at}}", bare("_dead_at"),
		"{{outbox_requeue}}", bare("_requeue"),
		"{{outbox_status_check}}", bare("_status_check"),
		"{{outbox_msg_id_check}}", bare("_msg_id_check"),
	}
}

// qualified quotes a table name, "schema.table" as two identifiers.
func (d dialect) qualified(name string) string {
	schema, table, ok := outboxdriver.SplitTableName(name)
	if !ok {
		return d.quote(table)
	}
	return d.quote(schema) + "." + d.quote(table)
}

// splitStatements splits a migration file at semicolons that end a line, and
// drops comment-only lines: MySQL's driver runs one statement per call.
func splitStatements(sql string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// insertMany returns the multi-row insert for n messages (MySQL, SQLite).
func (c *compiled) insertMany(n int) string {
	var b strings.Builder
	b.WriteString(c.InsertManyHead)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte(' ')
		b.WriteString(c.InsertManyRow)
	}
	return b.String()
}

// withIDs is withIDList where the dialect names rows in {{ids}} (idList);
// elsewhere it returns q and args as they are.
func (c *compiled) withIDs(q string, args []any, ids []int64) (string, []any) {
	if !c.idList {
		return q, args
	}
	return withIDList(q, args, ids)
}

// withIDList expands {{ids}} in q to one placeholder per id, of which there
// is at least one, and appends the ids to args.
func withIDList(q string, args []any, ids []int64) (string, []any) {
	ph := strings.Repeat("?, ", len(ids))
	q = strings.Replace(q, "{{ids}}", ph[:len(ph)-2], 1)
	for _, id := range ids {
		args = append(args, id)
	}
	return q, args
}

func quoteDouble(s string) string   { return `"` + s + `"` }
func quoteBacktick(s string) string { return "`" + s + "`" }

// dialects by name.
var dialects = map[string]dialect{
	"postgres": postgresDialect,
	"mysql":    mysqlDialect,
	"sqlite":   sqliteDialect,
}

package sqlstore

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/outbox-go/outbox"
)

//go:embed migrations
var migrationFS embed.FS

// claimMode is how a dialect keeps two relays off the same rows. In every
// mode the claim is one short transaction that commits before the publish,
// and the batch is held by a lease that other relays respect; the mark is a
// transaction of its own, which moves a row only from status 0. No
// transaction stays open while the broker has the batch, so a server's or a
// pooler's idle-in-transaction timeout never ends a claim.
type claimMode int

const (
	// claimChunks (PostgreSQL): the claim takes chunks of 256 ids, each
	// under a transaction-scoped advisory lock while it claims, and records
	// each chunk with its token and the end of its lease in {{claims}}
	// (INSERT ... ON CONFLICT, which reads the newest committed lease
	// whatever the statement's snapshot). The rows are not written until
	// the mark.
	claimChunks claimMode = iota
	// claimRowLease (MySQL): the claim locks the due rows with SELECT ...
	// FOR UPDATE SKIP LOCKED, records a lease per row in {{claims}} (a
	// MEMORY table, which every relay sees at once), and commits; the rows
	// are not written until the mark.
	claimRowLease
	// claimRange (SQLite): in one short write transaction, read the due rows
	// outside every live claim's id range and record this claim's range
	// with a lease; mark later, and drop the claim.
	claimRange
)

// dialect is all the SQL of one database, written as SQL. Table names appear as
// {{outbox}}, {{inbox}}, {{migrations}} and derived {{outbox_*}} names; compile
// replaces them with quoted identifiers, once (see names).
type dialect struct {
	name  string
	quote func(string) string
	mode  claimMode

	// insertOne inserts one message: args msg_id, topic, key (nil for none),
	// payload, headers (nil for none). PostgreSQL reports a duplicate as 0 rows;
	// the others as a unique violation.
	insertOne string
	// insertOneStrict is insertOne without ON CONFLICT (PostgreSQL): a
	// duplicate is a unique violation, which aborts the transaction. Empty
	// where insertOne already reports a duplicate as an error.
	insertOneStrict string
	// insertManyPG inserts from arrays (PostgreSQL only), returning msg_id.
	insertManyPG string
	// insertManyRow is one row of a multi-row VALUES insert (MySQL, SQLite).
	insertManyHead, insertManyRow string
	// deleteInserted removes rows of a failed all-or-nothing insert (PostgreSQL).
	deleteInserted string
	// existing lists which of a JSON array of msg_ids are in the table.
	existing string
	// consume inserts the inbox record; 0 rows affected means a duplicate.
	consume string

	// claim is the rescan, from the first id (PostgreSQL: from the
	// low-water mark). args: after id, limit; PostgreSQL also the claim's
	// token and its lease in milliseconds.
	claim string
	// claimAfter, when set, is the claim from a cursor (after id > 0), with
	// claim's arguments.
	claimAfter string
	// claimReturnsDue: the claim returns a ninth column, the row's
	// next_retry_at (PostgreSQL).
	claimReturnsDue bool
	// claimSetup, when set, runs at the start of each claim's transaction
	// (PostgreSQL: planner settings that keep the claim on its indexes).
	claimSetup string
	// markSetup, when set, runs at the start of each mark's transaction, as
	// claimSetup does for the claim.
	markSetup string
	// sweepCheck and sweepAdvance keep the low-water mark of the rescan
	// (PostgreSQL): see postgresDialect.
	sweepCheck, sweepAdvance string
	// rescanMark reads the low-water mark for Store.RescanMark.
	rescanMark string
	// seqCache reads the cache size of the id sequence, which the sweep
	// needs to be 1.
	seqCache string
	// claimExpire drops the expired claims (SQLite, MySQL); claimRecord
	// records a claim (SQLite: token, lo, hi, lease ms; MySQL: token, lease
	// µs, a JSON array of the ids); claimRelease (token) gives a claim's
	// rows back unmarked.
	claimExpire, claimRecord, claimRelease string
	// markSent marks rows SENT that are still NEW. args: the ids (a JSON
	// array; PostgreSQL: a bigint array, and the token, whose lease it
	// drops; MySQL: {{ids}}).
	markSent string
	// markSentRequeued, when set, is markSent for a batch with requeued
	// rows (PostgreSQL: it takes them out of the requeued index).
	markSentRequeued string
	// markOthers records the other outcomes of the rows the claim still
	// holds. args: a JSON array of {id, k, d, e}, k 1 retry or 2 dead (see
	// outbox.OutcomeKind), then the claim's token, then (MySQL) {{ids}}.
	// A released row is given back by dropping the claim.
	markOthers string
	// markLock, when set, locks the rows of markOthers ({{ids}}) before it
	// runs, in the same transaction (MySQL): markOthers reads the MEMORY
	// claims table, whose lock it would hold while it waits for a row that
	// a claim holds, and that claim waits for the claims table: a cycle
	// across engines that InnoDB cannot detect. Locking the rows first
	// takes the locks in the claim's order.
	markLock string

	// backlog counts the NEW rows and reads the oldest one's created_at and
	// the database's clock, through an index, never the SENT history (see
	// outbox.BacklogReader); backlogSetup, when set, runs first in its
	// transaction (PostgreSQL: planner settings that keep it on its
	// indexes). deadCount counts the DEAD rows through an index.
	backlog, backlogSetup, deadCount string

	// statsPending reads topic, count, min(created_at) and the database's
	// clock of the NEW rows per topic, as backlog finds them (after
	// backlogSetup); statsDead reads topic and count of the DEAD rows per
	// topic, as deadCount finds them; statsSpan reads newest id minus oldest
	// id plus one (0 when empty) from the primary key's two ends.
	statsPending, statsDead, statsSpan string
	list                               string // args: status, topic, after id, limit
	// listDead, when set, is list for the DEAD rows (args: topic, after id,
	// limit): it names the condition of the dialect's DEAD index literally,
	// which list's "status = $1" cannot.
	listDead string
	// listNew, when set, is list for the NEW rows (args: topic, after id,
	// limit), run after backlogSetup: the rows as backlog finds them.
	listNew    string
	get        string // args: msg_id
	retryDead  string // args: note, JSON array of msg_ids, all, topic
	dropDead   string // args: JSON array of msg_ids, all, topic
	deleteSent string // args: older-than ms, limit (see oldSent)
	// deleteConsumed deletes inbox records consumed before the cutoff, at
	// most limit of them. No index names consumed_at (one would cost every
	// consumer's insert), so a statement that finds fewer than limit has
	// read the whole inbox table. Args: older-than ms, limit; where
	// oldConsumed is set, the JSON array of the [group, msg_id] pairs it
	// read, then older-than µs.
	deleteConsumed string
	// oldSent and oldConsumed, where set (MySQL), read the keys of at most
	// limit rows that deleteSent and deleteConsumed are to delete, without
	// locking anything: the ids of old SENT rows, the [group, msg_id] of old
	// inbox records. deleteSent then takes the JSON array of the ids and
	// older-than µs. Args: older-than µs, limit.
	oldSent, oldConsumed string

	// explain is the prefix that makes the dialect describe a statement's
	// plan without running it.
	explain string
	// truncate empties the outbox table (benchmarks only).
	truncate string

	migrationsTable string
	schemaVersion   string
	recordVersion   string // args: version, name
	// lockMigrations, when set, takes the migrations' lock (args: lock
	// name). With unlockMigration it is a session's lock, which Migrate
	// takes and releases on a connection of its own (args: lock name,
	// seconds to wait; it answers 1 when granted); without, a transaction's.
	lockMigrations  string
	unlockMigration string // args: lock name; answers 1 when released

	// idList: markSent and markOthers name their rows in {{ids}}, one
	// placeholder per id, after their other arguments.
	idList bool
}

// compiled is a dialect with table names substituted.
type compiled struct {
	dialect
	migrations []migration
}

type migration struct {
	version    int
	name       string
	statements []string
}

func (d dialect) compile(t outbox.Tables) (*compiled, error) {
	r := strings.NewReplacer(d.names(t)...)
	c := &compiled{dialect: d}
	for _, p := range []*string{&c.insertOne, &c.insertOneStrict, &c.insertManyPG, &c.insertManyHead, &c.deleteInserted,
		&c.existing, &c.consume, &c.claim, &c.claimAfter, &c.sweepCheck, &c.sweepAdvance, &c.rescanMark, &c.seqCache, &c.claimExpire, &c.claimRecord, &c.claimRelease, &c.markSent, &c.markSentRequeued, &c.markOthers, &c.markLock, &c.statsPending, &c.statsDead, &c.statsSpan, &c.backlog, &c.deadCount, &c.list, &c.listDead, &c.listNew, &c.get,
		&c.retryDead, &c.dropDead, &c.deleteSent, &c.deleteConsumed, &c.oldSent, &c.oldConsumed, &c.truncate, &c.migrationsTable, &c.schemaVersion, &c.recordVersion} {
		*p = r.Replace(*p)
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
	schema, table, _ := outbox.SplitTableName(t.Outbox)
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
	schema, table, ok := outbox.SplitTableName(name)
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
	b.WriteString(c.insertManyHead)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.insertManyRow)
	}
	return b.String()
}

// withIDs expands {{ids}} in q to one placeholder per id and appends the ids
// to args.
func (c *compiled) withIDs(q string, args []any, ids []int64) (string, []any) {
	if !c.idList {
		return q, args
	}
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

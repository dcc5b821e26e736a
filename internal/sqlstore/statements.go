package sqlstore

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"reflect"
	"regexp"
	"strings"
	"unicode"
)

//go:embed sql/*/*.sql sql/*/_partials/*.sql sql/*/keyorder/*.sql
var sqlFS embed.FS

// statements is all the SQL of one dialect, read from its folder of
// sql/<dialect>: one file per field, named after the field in snake case
// (ClaimAfter: claim_after.sql). A field without a file stays empty, which
// means "none" where the field says "when set". The tag need names the
// claim designs whose dialect must have the field, as claimDesign.need
// names them ("all": every dialect).
// Table names appear as {{outbox}}, {{inbox}}, {{migrations}} and derived
// {{outbox_*}} names (see dialect.names). The per-dialect contract of a
// statement is the comment that heads its file.
type statements struct {
	// InsertOne inserts one message: args msg_id, topic, key (nil for none),
	// payload, headers (nil for none). PostgreSQL reports a duplicate as 0 rows;
	// the others as a unique violation.
	InsertOne string `need:"all"`
	// InsertOneStrict is InsertOne without ON CONFLICT (PostgreSQL): a
	// duplicate is a unique violation, which aborts the transaction. Empty
	// where InsertOne already reports a duplicate as an error.
	InsertOneStrict string `need:"chunks"`
	// InsertManyPG inserts from arrays (PostgreSQL only), returning msg_id.
	InsertManyPG string `need:"chunks"`
	// InsertManyHead, then InsertManyRow once per row, separated by commas,
	// is a multi-row VALUES insert (MySQL, SQLite; see compiled.insertMany).
	InsertManyHead string `need:"rows,range"`
	InsertManyRow  string `need:"rows,range"`
	// DeleteInserted removes rows of a failed all-or-nothing insert (PostgreSQL).
	DeleteInserted string `need:"chunks"`
	// Existing lists which of a JSON array of msg_ids are in the table.
	Existing string `need:"all"`
	// Consume inserts the inbox record; 0 rows affected means a duplicate.
	Consume string `need:"all"`

	// Claim is the rescan, from the first id (PostgreSQL: from the
	// low-water mark). args: after id, limit; PostgreSQL also the claim's
	// token and its lease in milliseconds.
	Claim string `need:"all"`
	// ClaimAfter, when set, is the claim from a cursor (after id > 0), with
	// Claim's arguments.
	ClaimAfter string
	// ClaimIDs is ClaimIDs' claim of the rows of given ids: PostgreSQL's
	// takes them in a bigint array, the others in {{ids}}.
	ClaimIDs string `need:"all"`
	// ClaimSetup, when set, runs at the start of each claim's transaction
	// (PostgreSQL: planner settings that keep the claim on its indexes).
	ClaimSetup string
	// MarkSetup, when set, runs at the start of each mark's transaction, as
	// ClaimSetup does for the claim.
	MarkSetup string
	// SweepCheck and SweepAdvance keep the low-water mark of the rescan
	// (PostgreSQL): see sweep_check.sql.
	SweepCheck   string `need:"chunks"`
	SweepAdvance string `need:"chunks"`
	// RescanMark reads the low-water mark for Store.RescanMark.
	RescanMark string `need:"chunks"`
	// SeqCache reads the cache size of the id sequence, which the sweep
	// needs to be 1.
	SeqCache string `need:"chunks"`
	// ClaimExpire drops the expired claims (SQLite, MySQL).
	ClaimExpire string `need:"rows,range"`
	// ClaimRecord records a claim (SQLite: token, lo, hi, lease ms; MySQL:
	// token, lease µs, a JSON array of the ids).
	ClaimRecord string `need:"rows,range"`
	// ClaimRelease (token) gives a claim's rows back unmarked.
	ClaimRelease string `need:"all"`
	// MarkSent marks rows SENT that are still NEW. args: the ids (a JSON
	// array; PostgreSQL: a bigint array, and the token, whose lease it
	// drops; MySQL: {{ids}}).
	MarkSent string `need:"all"`
	// MarkSentRequeued, when set, is MarkSent for a batch with requeued
	// rows (PostgreSQL: it takes them out of the requeued index).
	MarkSentRequeued string
	// MarkOthers records the other outcomes of the rows the claim still
	// holds. args: a JSON array of {id, k, d, e}, k 1 retry or 2 dead (see
	// outbox.OutcomeKind), then the claim's token, then (MySQL) {{ids}}.
	// A released row is given back by dropping the claim.
	MarkOthers string `need:"all"`
	// MarkLock, when set, locks the rows of MarkOthers ({{ids}}) before it
	// runs, in the same transaction (MySQL): MarkOthers reads the MEMORY
	// claims table, whose lock it would hold while it waits for a row that
	// a claim holds, and that claim waits for the claims table: a cycle
	// across engines that InnoDB cannot detect. Locking the rows first
	// takes the locks in the claim's order.
	MarkLock string
	// Probe is AnyDue's one statement: is any row NEW and due? It reads no
	// lease: a row another relay holds counts as due, and the claim that
	// follows finds it held. Rows: the low-water mark, the highest id (both
	// 0 where there is no mark), whether a row is due.
	Probe string `need:"all"`

	// Backlog counts the NEW rows and reads the oldest one's created_at and
	// the database's clock, through an index, never the SENT history (see
	// outboxdriver.BacklogReader).
	Backlog string `need:"all"`
	// BacklogSetup, when set, runs first in Backlog's transaction
	// (PostgreSQL: planner settings that keep it on its indexes).
	BacklogSetup string
	// DeadCount counts the DEAD rows through an index.
	DeadCount string `need:"all"`

	// StatsPending reads topic, count, min(created_at) and the database's
	// clock of the NEW rows per topic, as Backlog finds them (after
	// BacklogSetup).
	StatsPending string `need:"all"`
	// StatsDead reads topic and count of the DEAD rows per topic, as
	// DeadCount finds them.
	StatsDead string `need:"all"`
	// StatsSpan reads newest id minus oldest id plus one (0 when empty)
	// from the primary key's two ends.
	StatsSpan string `need:"all"`
	// List lists rows. Args: status, topic, after id, limit.
	List string `need:"all"`
	// ListDead, when set, is List for the DEAD rows (args: topic, after id,
	// limit): it names the condition of the dialect's DEAD index literally,
	// which List's "status = $1" cannot.
	ListDead string
	// ListNew, when set, is List for the NEW rows (args: topic, after id,
	// limit), run after BacklogSetup: the rows as Backlog finds them.
	ListNew string
	// Get reads one row. Args: msg_id.
	Get string `need:"all"`
	// RetryDead moves DEAD rows back to NEW. Args: note, JSON array of
	// msg_ids, all, topic.
	RetryDead string `need:"all"`
	// DropDead deletes DEAD rows. Args: JSON array of msg_ids, all, topic.
	DropDead string `need:"all"`
	// DeleteSent deletes SENT rows. Args: older-than ms, limit (see OldSent).
	DeleteSent string `need:"all"`
	// DeleteConsumed deletes inbox records consumed before the cutoff, at
	// most limit of them. No index names consumed_at (one would cost every
	// consumer's insert), so a statement that finds fewer than limit has
	// read the whole inbox table. Args: older-than ms, limit; where
	// OldConsumed is set, the JSON array of the [group, msg_id] pairs it
	// read, then older-than µs.
	DeleteConsumed string `need:"all"`
	// OldSent and OldConsumed, where set (MySQL), read the keys of at most
	// limit rows that DeleteSent and DeleteConsumed are to delete, without
	// locking anything: the ids of old SENT rows, the [group, msg_id] of old
	// inbox records. DeleteSent then takes the JSON array of the ids and
	// older-than µs. Args: older-than µs, limit.
	OldSent     string
	OldConsumed string

	// Explain is the keyword that, before a statement and a space, makes
	// the dialect describe the statement's plan without running it.
	Explain string `need:"all"`
	// Truncate empties the outbox table (benchmarks only).
	Truncate string `need:"all"`

	// MigrationsTable creates the migrations table.
	MigrationsTable string `need:"all"`
	// SchemaVersion reads the highest version applied.
	SchemaVersion string `need:"all"`
	// RecordVersion records a version applied. Args: version, name.
	RecordVersion string `need:"all"`
	// LockMigrations, when set, takes the migrations' lock (args: lock
	// name). With UnlockMigration it is a session's lock, which Migrate
	// takes and releases on a connection of its own (args: lock name,
	// seconds to wait; it answers 1 when granted); without, a transaction's.
	LockMigrations string
	// UnlockMigration releases the session's lock. Args: lock name; answers
	// 1 when released.
	UnlockMigration string
}

// includeRE matches an include of a partial: {{> name}} or {{> name arg}}.
var includeRE = regexp.MustCompile(`\{\{> ([a-z_]+)(?: ([^{}]+))?\}\}`)

// sqlSource is one dialect's SQL files: its partials and the statements of
// its folders, with the partials included.
type sqlSource struct {
	fsys     fs.FS
	dir      string
	partials map[string]string
	// included are the partials some statement includes.
	included map[string]bool
}

// readSQL reads a file of SQL: its leading comment lines ("--") and blank
// lines are dropped, and the white space around the rest.
func readSQL(fsys fs.FS, name string) (string, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return "", err
	}
	lines := strings.Split(string(b), "\n")
	for len(lines) > 0 {
		if t := strings.TrimSpace(lines[0]); t != "" && !strings.HasPrefix(t, "--") {
			break
		}
		lines = lines[1:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n")), nil
}

// newSQLSource reads the partials of sql/<dialect>/_partials in fsys.
func newSQLSource(fsys fs.FS, dialectName string) (*sqlSource, error) {
	src := &sqlSource{fsys: fsys, dir: "sql/" + dialectName, partials: map[string]string{}, included: map[string]bool{}}
	entries, err := fs.ReadDir(fsys, src.dir+"/_partials")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".sql")
		if !ok || e.IsDir() {
			return nil, fmt.Errorf("outbox: %s/_partials/%s is not a .sql file", src.dir, e.Name())
		}
		if src.partials[name], err = readSQL(src.fsys, src.dir+"/_partials/"+e.Name()); err != nil {
			return nil, err
		}
	}
	return src, nil
}

// expand replaces each {{> name}} in s by the partial name, and each
// {{> name arg}} by the partial with its {{arg}} replaced by arg; a partial
// may include others.
func (src *sqlSource) expand(s string, depth int) (string, error) {
	if depth > 8 {
		return "", fmt.Errorf("outbox: %s: partials include each other too deeply", src.dir)
	}
	var err error
	out := includeRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := includeRE.FindStringSubmatch(m)
		p, ok := src.partials[sub[1]]
		if !ok {
			err = fmt.Errorf("outbox: %s: no partial %s (%s/_partials/%s.sql)", src.dir, sub[1], src.dir, sub[1])
			return m
		}
		src.included[sub[1]] = true
		if sub[2] != "" {
			p = strings.ReplaceAll(p, "{{arg}}", sub[2])
		}
		p, err2 := src.expand(p, depth+1)
		if err2 != nil && err == nil {
			err = err2
		}
		return p
	})
	return out, err
}

// load fills the string fields of the struct dst points to from the .sql
// files of the folder dir (under the dialect's), one per field, with the
// partials included. A file that names no field is an error, and so is a
// field that the tag need asks of the claim design named design and that
// has no file.
func (src *sqlSource) load(dir string, dst any, design string) error {
	v := reflect.ValueOf(dst).Elem()
	fields := map[string]reflect.Value{}
	for i := 0; i < v.NumField(); i++ {
		fields[snakeCase(v.Type().Field(i).Name)] = v.Field(i)
	}
	folder := path.Join(src.dir, dir)
	entries, err := fs.ReadDir(src.fsys, folder)
	if err != nil {
		return fmt.Errorf("outbox: no SQL for dialect %s: %w", src.dir, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		name, _ := strings.CutSuffix(e.Name(), ".sql")
		f, ok := fields[name]
		if !ok || f.Kind() != reflect.String || !strings.HasSuffix(e.Name(), ".sql") {
			return fmt.Errorf("outbox: %s/%s names no statement", folder, e.Name())
		}
		s, err := readSQL(src.fsys, folder+"/"+e.Name())
		if err != nil {
			return err
		}
		if s, err = src.expand(s, 0); err != nil {
			return fmt.Errorf("%w (in %s/%s)", err, folder, e.Name())
		}
		f.SetString(s)
	}
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if v.Field(i).String() == "" && needs(f.Tag.Get("need"), design) {
			return fmt.Errorf("outbox: %s has no %s.sql", folder, snakeCase(f.Name))
		}
	}
	return nil
}

// needs reports whether the tag need asks a field of the claim design named
// design.
func needs(tag, design string) bool {
	for _, m := range strings.Split(tag, ",") {
		if m == "all" || m == design {
			return true
		}
	}
	return false
}

// snakeCase is a field's name as its file names it: ClaimIDs, claim_ids.
func snakeCase(s string) string {
	var b strings.Builder
	prev := rune(0)
	for _, r := range s {
		if unicode.IsUpper(r) && (unicode.IsLower(prev) || unicode.IsDigit(prev)) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
		prev = r
	}
	return b.String()
}

// substitute replaces the placeholders of r in every string field of the
// struct dst points to, and reports a placeholder left over other than
// {{ids}}, which withIDs expands per call.
func substitute(r *strings.Replacer, dst any, what string) error {
	v := reflect.ValueOf(dst).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if f.Kind() != reflect.String {
			continue
		}
		s := r.Replace(f.String())
		rest := strings.ReplaceAll(s, "{{ids}}", "")
		if at := strings.Index(rest, "{{"); at >= 0 {
			rest = rest[at:]
			return fmt.Errorf("outbox: %s %s: unknown placeholder at %q", what, snakeCase(v.Type().Field(i).Name), rest[:min(len(rest), 40)])
		}
		f.SetString(s)
	}
	return nil
}

// loadSQL reads the statements of d from sql/<name> into st, and its
// hold-back SQL from sql/<name>/keyorder into ko.
func loadSQL(d dialect, st *statements, ko *keyOrderSQL) (*sqlSource, error) {
	src, err := newSQLSource(sqlFS, d.name)
	if err != nil {
		return nil, err
	}
	if err := src.load(".", st, d.claims.need); err != nil {
		return nil, err
	}
	return src, src.load("keyorder", ko, d.claims.need)
}

// expandedPartials returns the partials with their includes expanded and
// the placeholders of r replaced, for the statements built in Go. It leaves
// included as the statements left it.
func (src *sqlSource) expandedPartials(r *strings.Replacer) (map[string]string, error) {
	saved := src.included
	defer func() { src.included = saved }()
	src.included = map[string]bool{}
	out := make(map[string]string, len(src.partials))
	for name, p := range src.partials {
		s, err := src.expand(p, 0)
		if err != nil {
			return nil, err
		}
		out[name] = r.Replace(s)
	}
	return out, nil
}

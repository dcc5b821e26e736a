package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/outbox-go/outbox/outboxdriver"
)

// CheckSchema compares the database with the schema this build needs: the
// recorded version against the latest one and, when they are equal, the
// columns (and their types), indexes and triggers of every table against
// the database's catalog (pg_catalog, information_schema, sqlite_master).
// It changes nothing.
func (s *Store) CheckSchema(ctx context.Context) (outboxdriver.SchemaCheck, error) {
	c := outboxdriver.SchemaCheck{Latest: s.LatestVersion()}
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		return c, err
	}
	c.Version = v
	switch {
	case v == 0:
		c.Problems = append(c.Problems, fmt.Sprintf("no schema version is recorded in table %q: the tables were never migrated; run 'outbox migrate'", s.tables.Outbox+"_migrations"))
		return c, nil
	case v < c.Latest:
		c.Problems = append(c.Problems, fmt.Sprintf("schema version %d is behind this build's %d; run 'outbox migrate' (or apply 'outbox migrate --print --from %d')", v, c.Latest, v))
		return c, nil
	case v > c.Latest:
		c.Problems = append(c.Problems, fmt.Sprintf("schema version %d is newer than this build's %d: upgrade outbox", v, c.Latest))
		return c, nil
	}
	cat := catalogs[s.c.name]
	for _, want := range schemaSpecs[s.c.name] {
		name := s.specTable(want.table)
		problems, unlisted, err := s.checkTable(ctx, cat, name, want)
		if err != nil {
			return c, s.wrap("check schema of table "+name, err)
		}
		c.Problems = append(c.Problems, problems...)
		c.Unlisted = append(c.Unlisted, unlisted...)
	}
	return c, nil
}

// specTable is the name of a table of the spec: "outbox", "inbox", or the
// suffix of a table the outbox table brings with it ("_claims").
func (s *Store) specTable(table string) string {
	switch table {
	case "outbox":
		return s.tables.Outbox
	case "inbox":
		return s.tables.Inbox
	}
	return s.tables.Outbox + table
}

// checkTable reads one table's columns, indexes and triggers from the
// catalog and lists how they differ from want, and what want does not name.
func (s *Store) checkTable(ctx context.Context, cat catalog, name string, want tableSpec) (problems, unlisted []string, err error) {
	_, bare, _ := outboxdriver.SplitTableName(name)
	args := cat.args(s.c.dialect, name)
	rows, err := s.db.Query(ctx, cat.columns, args...)
	if err != nil {
		return nil, nil, err
	}
	type column struct{ typ, collation string }
	have := map[string]column{}
	for rows.Next() {
		var n, t string
		var coll textValue
		if err := rows.Scan(&n, &t, &coll); err != nil {
			rows.Close()
			return nil, nil, err
		}
		have[n] = column{strings.ToLower(t), coll.s}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if len(have) == 0 {
		return []string{fmt.Sprintf("table %q is missing", name)}, nil, nil
	}
	for n := range have {
		if !slices.ContainsFunc(want.columns, func(c columnSpec) bool { return c.name == n }) {
			unlisted = append(unlisted, fmt.Sprintf("column %s.%s", name, n))
		}
	}
	for _, w := range want.columns {
		h, ok := have[w.name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("column %s.%s is missing", name, w.name))
		case !slices.Contains(w.types, h.typ):
			problems = append(problems, fmt.Sprintf("column %s.%s is %s; the relay needs %s", name, w.name, h.typ, strings.Join(w.types, " or ")))
		case len(w.collations) > 0 && !slices.Contains(w.collations, h.collation):
			problems = append(problems, fmt.Sprintf("column %s.%s has collation %s; the relay needs %s (schema version 3)", name, w.name, h.collation, strings.Join(w.collations, " or ")))
		}
	}
	for _, k := range []struct {
		what, stmt string
		names      []string
	}{{"index", cat.indexes, want.indexes}, {"trigger", cat.triggers, want.triggers}} {
		rows, err := s.db.Query(ctx, k.stmt, args...)
		if err != nil {
			return nil, nil, err
		}
		found, err := scanStrings(rows)
		if err != nil {
			return nil, nil, err
		}
		names := make([]string, len(k.names))
		for i, n := range k.names {
			if strings.HasPrefix(n, "_") {
				n = bare + n
			}
			names[i] = n
			if !slices.Contains(found, n) {
				problems = append(problems, fmt.Sprintf("%s %s on table %s is missing", k.what, n, name))
			}
		}
		for _, f := range found {
			// SQLite's own indexes of a UNIQUE or a WITHOUT ROWID key.
			if !slices.Contains(names, f) && !strings.HasPrefix(f, "sqlite_autoindex_") {
				unlisted = append(unlisted, fmt.Sprintf("%s %s on table %s", k.what, f, name))
			}
		}
	}
	slices.Sort(unlisted)
	return problems, unlisted, nil
}

// catalog reads a table's columns (name, type, collation or NULL), index
// names and trigger names. args gives the statements' arguments for a
// table name, which may be qualified.
type catalog struct {
	columns, indexes, triggers string
	args                       func(d dialect, name string) []any
}

// catalogs by dialect. PostgreSQL finds the table as the relay's statements
// do (to_regclass of the quoted name, through the search_path when it is not
// qualified); MySQL in the named database, else the connection's; SQLite in
// its one schema.
var catalogs = map[string]catalog{
	"postgres": {
		columns: `SELECT a.attname, format_type(a.atttypid, a.atttypmod), NULL::text FROM pg_attribute AS a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`,
		indexes:  `SELECT c.relname::text FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid WHERE i.indrelid = to_regclass($1)`,
		triggers: `SELECT t.tgname::text FROM pg_trigger AS t WHERE t.tgrelid = to_regclass($1) AND NOT t.tgisinternal`,
		args:     func(d dialect, name string) []any { return []any{d.qualified(name)} },
	},
	"mysql": {
		columns: `SELECT COLUMN_NAME, CASE
  WHEN DATA_TYPE IN ('varchar', 'char') THEN CONCAT(DATA_TYPE, '(', CHARACTER_MAXIMUM_LENGTH, ')')
  WHEN DATA_TYPE = 'datetime' THEN CONCAT(DATA_TYPE, '(', DATETIME_PRECISION, ')')
  ELSE DATA_TYPE END, COLLATION_NAME
FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?`,
		indexes:  `SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ?`,
		triggers: `SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND EVENT_OBJECT_TABLE = ?`,
		args: func(_ dialect, name string) []any {
			schema, table, _ := outboxdriver.SplitTableName(name)
			return []any{schema, table}
		},
	},
	"sqlite": {
		columns:  `SELECT name, type, NULL FROM pragma_table_info(?)`,
		indexes:  `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?`,
		triggers: `SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?`,
		args:     func(_ dialect, name string) []any { return []any{name} },
	},
}

var _ outboxdriver.SchemaChecker = (*Store)(nil)

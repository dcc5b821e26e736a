package main

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/clitest"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"strings"
	"testing"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// schemaCase is one database for the --print and --check tests.
type schemaCase struct {
	b *backend
	// script runs a whole --print script as the database's owner.
	script func(t *testing.T, sql string)
	// drift breaks the migrated tables in three ways; want are the
	// problems --check must report for them.
	drift []string
	want  []string
}

func schemaCases(t *testing.T, name string) schemaCase {
	switch name {
	case "postgres":
		b := newPostgres(t)
		return schemaCase{b: b,
			script: func(t *testing.T, s string) { execOrFail(t, b.db, s) },
			drift: []string{
				"ALTER TABLE outbox ALTER COLUMN topic TYPE varchar(32)",
				"DROP INDEX outbox_dead_idx",
				"DROP TRIGGER outbox_requeue ON outbox",
				"ALTER TABLE outbox_claims DROP COLUMN gen",
			},
			want: []string{
				"column outbox.topic is character varying(32); the relay needs character varying(128)",
				"index outbox_dead_idx on table outbox is missing",
				"trigger outbox_requeue on table outbox is missing",
				"column outbox_claims.gen is missing",
			}}
	case "mysql":
		b := newMySQL(t)
		return schemaCase{b: b,
			script: func(t *testing.T, s string) {
				db := clitest.OpenOrFail(t, "mysql", strings.TrimPrefix(strings.Replace(b.dsn, "@127.0.0.1:3306", "@tcp(127.0.0.1:3306)", 1), "mysql://")+"?multiStatements=true", "MariaDB")
				execOrFail(t, db, s)
			},
			drift: []string{
				"ALTER TABLE outbox MODIFY msg_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL",
				"ALTER TABLE outbox DROP INDEX outbox_pending_idx",
				"ALTER TABLE outbox MODIFY retries BIGINT NOT NULL DEFAULT 0",
			},
			want: []string{
				"column outbox.msg_id has collation utf8mb4_bin; the relay needs utf8mb4_nopad_bin or utf8mb4_0900_bin (schema version 3)",
				"index outbox_pending_idx on table outbox is missing",
				"column outbox.retries is bigint; the relay needs int",
			}}
	}
	b := newSQLite(t)
	return schemaCase{b: b,
		script: func(t *testing.T, s string) { execOrFail(t, b.db, s) },
		drift:  []string{"DROP INDEX outbox_dead_idx", "ALTER TABLE outbox DROP COLUMN last_error"},
		want:   []string{"index outbox_dead_idx on table outbox is missing", "column outbox.last_error is missing"}}
}

func execOrFail(t *testing.T, db *sql.DB, s string) {
	t.Helper()
	if _, err := db.Exec(s); err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
}

// TestMigratePrintThenCheck applies 'outbox migrate --print' as a DBA
// would, without outbox migrate, and checks it with --check: current, then
// behind (a version's record gone), then drifted.
func TestMigratePrintThenCheck(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"postgres", "mysql", "sqlite"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := schemaCases(t, name)
			// --print connects to nothing: a DSN that cannot be reached
			// names the dialect.
			unreachable := map[string]string{"postgres": "postgres://nobody@127.0.0.1:1/none",
				"mysql": "mysql://nobody@127.0.0.1:1/none", "sqlite": "sqlite:/nonexistent/dir/outbox.db"}[name]
			script := mustRun(t, "migrate", "--print", "--db", unreachable).stdout
			if byFlag := mustRun(t, "migrate", "--print", "--dialect", name).stdout; byFlag != script {
				t.Errorf("--dialect %s prints another script than --db", name)
			}
			latest := latestSchema[name]
			for v := 1; v <= latest; v++ {
				if !strings.Contains(script, fmt.Sprintf("\n-- version %d: %03d_", v, v)) {
					t.Errorf("the script has no section for version %d:\n%s", v, script)
				}
			}
			upgrade := mustRun(t, "migrate", "--print", "--dialect", name, "--from", fmt.Sprint(latest-1)).stdout
			if strings.Contains(upgrade, fmt.Sprintf("-- version %d:", latest-1)) || !strings.Contains(upgrade, fmt.Sprintf("-- version %d:", latest)) {
				t.Errorf("--from %d prints other versions than %d:\n%s", latest-1, latest, upgrade)
			}

			if r := runCLI(t, nil, "migrate", "--check", "--db", c.b.dsn); r.code != 1 || !strings.Contains(r.stderr, "do not exist") {
				t.Errorf("--check before any migration: %s", r)
			}
			c.script(t, script)
			r := mustRun(t, "migrate", "--check", "--db", c.b.dsn)
			if !strings.Contains(r.stdout, fmt.Sprintf("is current (version %d)", latest)) {
				t.Errorf("--check after the printed script: %s", r)
			}
			c.b.exec(t, fmt.Sprintf("DELETE FROM outbox_migrations WHERE version = %d", latest))
			if r := runCLI(t, nil, "migrate", "--check", "--db", c.b.dsn); r.code != 1 ||
				!strings.Contains(r.stdout, fmt.Sprintf("schema version %d is behind this build's %d", latest-1, latest)) {
				t.Errorf("--check a version behind: %s", r)
			}
			mustRun(t, "migrate", "--db", c.b.dsn)
			for _, q := range c.drift {
				c.b.exec(t, q)
			}
			r = runCLI(t, nil, "migrate", "--check", "--db", c.b.dsn)
			if r.code != 1 || !strings.Contains(r.stderr, fmt.Sprintf("%d problems listed above", len(c.want))) {
				t.Errorf("--check a drifted schema: %s", r)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stdout, w+"\n") {
					t.Errorf("--check does not say %q:\n%s", w, r)
				}
			}
		})
	}
}

// TestMigrateQualifiedTables migrates tables named schema.table (a
// PostgreSQL schema, a MariaDB database) from a connection whose own schema
// is another, runs a relay on them, and finds everything the migration made
// in the named schema and nothing in the connection's.
func TestMigrateQualifiedTables(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"postgres", "mysql"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			home, other := schemaCases(t, name).b, schemaCases(t, name).b
			otherName := map[string]func(*backend) string{
				"postgres": func(b *backend) string { return strings.TrimPrefix(b.dsn, clitest.PGAdminDSN+"?search_path=") },
				"mysql":    func(b *backend) string { return b.dsn[strings.LastIndex(b.dsn, "/")+1:] },
			}[name](other)
			tables := []string{"--table", otherName + ".events", "--inbox-table", otherName + ".seen"}
			mustRun(t, append([]string{"migrate", "--db", home.dsn}, tables...)...)
			mustRun(t, append([]string{"migrate", "--check", "--db", home.dsn}, tables...)...)
			// Every object in the named schema, none in the connection's.
			var inHome, inOther int64
			switch name {
			case "postgres":
				q := "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1"
				home.db.QueryRow(q, strings.TrimPrefix(home.dsn, clitest.PGAdminDSN+"?search_path=")).Scan(&inHome)
				other.db.QueryRow(q, otherName).Scan(&inOther)
				var fns, trig int64
				other.db.QueryRow("SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1", otherName).Scan(&fns)
				other.db.QueryRow("SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1)", otherName+".events").Scan(&trig)
				if fns != 2 || trig != 2 {
					t.Errorf("%d functions in %s and %d triggers on its table, want 2 and 2", fns, otherName, trig)
				}
			case "mysql":
				q := "SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?"
				home.db.QueryRow(q, home.dsn[strings.LastIndex(home.dsn, "/")+1:]).Scan(&inHome)
				other.db.QueryRow(q, otherName).Scan(&inOther)
			}
			if inHome != 0 || inOther == 0 {
				t.Errorf("%d objects in the connection's schema, %d in %s; want none and some", inHome, inOther, otherName)
			}
			other.exec(t, "INSERT INTO events (msg_id, topic, payload) VALUES ('q-1', 't', '{}')")
			other.exec(t, "INSERT INTO events (msg_id, topic, payload, status) VALUES ('q-dead', 't', '{}', 0)")
			other.exec(t, "UPDATE events SET status = 2, retries = 10, last_error = 'said no' WHERE msg_id = 'q-dead'")
			var stderr func() string
			stop := startRelayLogged(t, &stderr, nil, append([]string{"--db", home.dsn, "--broker", "discard:", "--interval", "50ms",
				"--admin-addr", "127.0.0.1:0", "--admin-insecure"}, tables...)...)
			waitFor(t, "the message SENT", 30e9, func() bool { return other.queryInt(t, "SELECT count(*) FROM events WHERE status = 1") == 1 })
			// The console reads the qualified tables: DEAD search, count,
			// failure groups and the per-topic backlog.
			base := urlInLog(t, stderr, consoleLogURL)
			for path, want := range map[string]string{
				"/api/dead?error=said":       "q-dead",
				"/api/dead/count?error=said": `"count":1`,
				"/api/groups":                "said no",
				"/api/message?msg_id=q-dead": "said no",
			} {
				if code, body := adminCall(t, "GET", base+path, "", ""); code != 200 || !strings.Contains(body, want) {
					t.Errorf("GET %s over %s: %d %s, want %s", path, otherName+".events", code, body, want)
				}
			}
			waitFor(t, "the console's backlog of topic t", 30e9, func() bool {
				code, body := adminCall(t, "GET", base+"/api/backlog", "", "")
				return code == 200 && strings.Contains(body, `"topic":"t"`)
			})
			stop()

			r := runCLI(t, nil, "migrate", "--db", home.dsn, "--table", "no_such_schema_x.outbox")
			if r.code != 1 || !strings.Contains(r.stderr, "no_such_schema_x") {
				t.Errorf("migrate into a schema that does not exist: %s", r)
			}
			for _, bad := range []string{"a.b.c", "Events.outbox", "events.", ".outbox", "ev-ts.outbox", `ev"s.outbox`} {
				if r := runCLI(t, nil, "migrate", "--print", "--dialect", name, "--table", bad); r.code == 0 || !strings.Contains(r.stderr, "--table") {
					t.Errorf("--table %q: %s", bad, r)
				}
			}
		})
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		if r := runCLI(t, nil, "migrate", "--print", "--dialect", "sqlite", "--table", "main.outbox"); r.code == 0 || !strings.Contains(r.stderr, "SQLite takes no schema") {
			t.Errorf("a schema on SQLite: %s", r)
		}
	})
}

// TestCheckSchemaKnowsEveryObject migrates fresh tables and checks them:
// no problem, and no column, index or trigger the check does not know, so
// that a migration which adds one must teach the check about it
// (internal/sqlstore/schemaspec.go).
func TestCheckSchemaKnowsEveryObject(t *testing.T) {
	t.Parallel()
	eachBackend(t, true, func(t *testing.T, b *backend) {
		ctx := context.Background()
		d, err := dbopen.Open(ctx, b.dsn, dbopen.TLS{}, outbox.Tables{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		c, err := d.Store.(outboxdriver.SchemaChecker).CheckSchema(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Problems) > 0 || len(c.Unlisted) > 0 || c.Version != latestSchema[b.name] {
			t.Errorf("fresh tables at version %d: problems %q; not in internal/sqlstore/schemaspec.go: %q", c.Version, c.Problems, c.Unlisted)
		}
	})
}

package main

import (
	"github.com/outbox-go/outbox/cmd/outbox/internal/brokers"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// checkError checks that a run failed with code and one line on stderr that
// starts with "outbox: " and contains every one of want.
func checkError(t *testing.T, r result, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d, want %d\n%s", r.code, code, r)
	}
	if !strings.HasPrefix(r.stderr, "outbox: ") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("stderr is not one line starting with \"outbox: \":\n%s", r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
}

func TestConnectionErrorsRedactThePassword(t *testing.T) {
	t.Parallel()
	const secret = "Sup3r-Secret-pw"
	for _, tc := range []struct {
		name, dsn string
		want      []string
	}{
		{"postgres wrong port", "postgres://postgres:" + secret + "@127.0.0.1:5433/test",
			[]string{"cannot connect to postgres at 127.0.0.1:5433/test", "connection refused", "check --db / OUTBOX_DB"}},
		{"postgresql scheme, bad port", "postgresql://postgres:" + secret + "@127.0.0.1:notaport/test",
			[]string{"invalid postgres --db", "invalid port"}},
		{"mysql wrong password", "mysql://root:" + secret + "@127.0.0.1:3306/test",
			[]string{"cannot connect to mysql at 127.0.0.1:3306/test", "Access denied", "check --db / OUTBOX_DB"}},
		{"mysql wrong port", "mysql://root:" + secret + "@127.0.0.1:3307/test",
			[]string{"cannot connect to mysql at 127.0.0.1:3307/test", "connection refused"}},
		{"mysql bad parameter", "mysql://root:" + secret + "@127.0.0.1:3306/test?tls=nonsense",
			[]string{"invalid mysql --db", "xxxxx"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, args := range [][]string{{"stats", "--db", tc.dsn}, {"migrate", "--db", tc.dsn}} {
				r := runCLI(t, nil, args...)
				checkError(t, r, 1, tc.want...)
				if strings.Contains(r.stderr+r.stdout, secret) {
					t.Errorf("the password is printed:\n%s", r)
				}
			}
			// The same through the environment.
			r := runCLI(t, []string{"OUTBOX_DB=" + tc.dsn}, "stats")
			checkError(t, r, 1, tc.want...)
			if strings.Contains(r.stderr, secret) {
				t.Errorf("the password is printed:\n%s", r)
			}
		})
	}
}

// A password with an "@" not written as %40: pgx took the first "@" as
// the end of the password, and its error printed the rest as the host.
func TestPasswordWithAnUnescapedAt(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, "stats", "--db", "postgres://postgres:Sup3r@Secret-pw@127.0.0.1:5432/test")
	checkError(t, r, 1, "holds an \"@\"; write it as %40")
	for _, part := range []string{"Sup3r", "Secret-pw"} {
		if strings.Contains(r.stderr+r.stdout, part) {
			t.Errorf("part of the password is printed:\n%s", r)
		}
	}
	// Written as %40 it is a password like any other.
	r = runCLI(t, nil, "stats", "--db", "postgres://postgres:Sup3r%40Secret-pw@127.0.0.1:5433/test")
	checkError(t, r, 1, "cannot connect to postgres at 127.0.0.1:5433/test")
}

func TestUsageAndConfigurationErrors(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want []string
	}{
		{"unknown db scheme", nil, []string{"stats", "--db", "foo://x"}, 1,
			[]string{`outbox: unknown database scheme "foo" in --db; use postgres://, mysql:// or sqlite:`}},
		{"db without scheme", nil, []string{"stats", "--db", "localhost"}, 1, []string{"not a database URL"}},
		{"unknown broker scheme", nil, []string{"relay", "--db", sqlite, "--broker", "x://y"}, 1,
			[]string{`outbox: unknown broker scheme "x" in --broker; supported: nats://, amqp(s)://, kafka://, redis(s)://, mqtt(s)://, http(s)://, discard:`}},
		{"bad broker parameter", nil, []string{"relay", "--db", sqlite, "--broker", "nats://127.0.0.1:4222?subjekt=x"}, 1,
			[]string{`unknown URL parameter "subjekt"`}},
		{"invalid table", nil, []string{"migrate", "--db", sqlite, "--table", "x;drop"}, 1,
			[]string{"invalid identifier", `"x;drop"`, "--table"}},
		{"invalid table from env", []string{"OUTBOX_TABLE=Bad-Name"}, []string{"stats", "--db", sqlite}, 1,
			[]string{"invalid identifier", `"Bad-Name"`}},
		{"same table twice", nil, []string{"migrate", "--db", sqlite, "--table", "t", "--inbox-table", "t"}, 1,
			[]string{"different names"}},
		{"missing db, migrate", nil, []string{"migrate"}, 2, []string{"missing --db (or OUTBOX_DB)", "outbox migrate --help"}},
		{"missing db, relay", nil, []string{"relay", "--broker", "discard:"}, 2, []string{"missing --db"}},
		{"missing broker", nil, []string{"relay", "--db", sqlite}, 2, []string{"missing --broker (or OUTBOX_BROKER)"}},
		{"missing db, stats", nil, []string{"stats"}, 2, []string{"missing --db"}},
		{"missing db, dead list", nil, []string{"dead", "list"}, 2, []string{"missing --db"}},
		{"missing db, cleanup", nil, []string{"cleanup", "--older-than", "1h"}, 2, []string{"missing --db"}},
		{"cleanup duty cycle 0", nil, []string{"cleanup", "--older-than", "1h", "--db", "sqlite:///nonexistent/x.db", "--duty-cycle", "0"}, 2, []string{"--duty-cycle 0 is out of range", "above 0 and at most 1"}},
		{"cleanup duty cycle not a number", nil, []string{"cleanup", "--older-than", "1h", "--db", "sqlite:///nonexistent/x.db", "--duty-cycle", "x"}, 2, []string{"--duty-cycle", "use a number such as 0.2"}},
		{"empty OUTBOX_DB counts as missing", []string{"OUTBOX_DB="}, []string{"stats"}, 2, []string{"missing --db"}},
		{"bad OUTBOX_BATCH", []string{"OUTBOX_BATCH=abc"}, []string{"relay", "--db", sqlite, "--broker", "discard:"}, 2,
			[]string{`invalid value "abc" in OUTBOX_BATCH`, "--batch", "whole number"}},
		{"bad OUTBOX_INTERVAL", []string{"OUTBOX_INTERVAL=soon"}, []string{"relay", "--db", sqlite, "--broker", "discard:"}, 2,
			[]string{"OUTBOX_INTERVAL", "duration"}},
		{"bad OUTBOX_JSON", []string{"OUTBOX_JSON=perhaps"}, []string{"stats", "--db", sqlite}, 2,
			[]string{"OUTBOX_JSON", "true or false"}},
		{"bad --batch", nil, []string{"relay", "--db", sqlite, "--broker", "discard:", "--batch", "abc"}, 2,
			[]string{"--batch"}},
		{"batch out of range", nil, []string{"relay", "--db", sqlite, "--broker", "discard:", "--batch", "0"}, 2,
			[]string{"--batch 0 is out of range"}},
		{"retry-max below retry-base", nil, []string{"relay", "--db", sqlite, "--broker", "discard:", "--retry-base", "1m", "--retry-max", "1s"}, 2,
			[]string{"--retry-max"}},
		{"bad log level", nil, []string{"relay", "--db", sqlite, "--broker", "discard:", "--log-level", "loud"}, 2,
			[]string{"--log-level"}},
		{"bad log format", nil, []string{"relay", "--db", sqlite, "--broker", "discard:", "--log-format", "xml"}, 2,
			[]string{"--log-format"}},
		{"scaling with one relay", nil, []string{"bench", "--db", sqlite, "--scaling"}, 2,
			[]string{"--scaling compares --relays N with one relay", "--relays 2 or more"}},
		{"unknown command", nil, []string{"frobnicate"}, 2, []string{`unknown command "frobnicate"`, "outbox help"}},
		{"flag before command", nil, []string{"--db", "x", "stats"}, 2, []string{"flags go after the command"}},
		{"unknown flag", nil, []string{"stats", "--db", sqlite, "--colour"}, 2, []string{"unknown flag --colour", "outbox stats --help"}},
		{"flag without value", nil, []string{"stats", "--db"}, 2, []string{"--db"}},
		{"unexpected argument", nil, []string{"migrate", "--db", sqlite, "extra"}, 2, []string{`unexpected argument "extra"`}},
		{"unknown dead subcommand", nil, []string{"dead", "bury"}, 2, []string{`unknown subcommand "bury"`}},
		{"missing dead subcommand", nil, []string{"dead"}, 2, []string{"missing subcommand"}},
		{"dead show without id", nil, []string{"dead", "show", "--db", sqlite}, 2, []string{"missing MSG_ID"}},
		{"cleanup without an age", nil, []string{"cleanup", "--db", sqlite}, 2, []string{"give --older-than", "--inbox-older-than"}},
		{"cleanup, inbox negative", nil, []string{"cleanup", "--db", sqlite, "--inbox-older-than", "-1h"}, 2, []string{"--inbox-older-than -1h0m0s is negative"}},
		{"cleanup negative", nil, []string{"cleanup", "--db", sqlite, "--older-than", "-1h"}, 2, []string{"negative"}},
		{"missing sqlite file", nil, []string{"stats", "--db", sqlite}, 1, []string{"does not exist", "outbox migrate"}},
		{"sqlite in memory", nil, []string{"migrate", "--db", "sqlite::memory:"}, 1, []string{"file path"}},
		{"sqlite in missing directory", nil, []string{"migrate", "--db", "sqlite:/nonexistent/dir/x.db"}, 1, []string{"cannot open sqlite file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkError(t, runCLI(t, tc.env, tc.args...), tc.code, tc.want...)
		})
	}
	if _, err := os.Stat(strings.TrimPrefix(sqlite, "sqlite:")); err == nil {
		t.Errorf("a command other than migrate created the SQLite file %s", sqlite)
	}
}

func TestFlagWinsOverEnvironment(t *testing.T) {
	t.Parallel()
	b := newSQLite(t)
	mustRun(t, "migrate", "--db", b.dsn)
	b.insert(t, "a", "t", `{}`)
	// OUTBOX_BATCH is invalid but --batch is given; OUTBOX_DB points elsewhere.
	env := []string{"OUTBOX_BATCH=abc", "OUTBOX_DB=foo://nowhere", "OUTBOX_JSON=true"}
	stop := startRelay(t, env, "--db", b.dsn, "--broker", "discard:", "--batch", "10", "--interval", "50ms")
	waitFor(t, "a SENT", 30*time.Second, func() bool { return b.status(t, "a") == 1 })
	if r := stop(); r.code != 0 {
		t.Fatalf("relay: %s", r)
	}
	r := runCLI(t, env, "stats", "--db", b.dsn)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "{") {
		t.Fatalf("stats with OUTBOX_JSON=true should print JSON: %s", r)
	}
	r = runCLI(t, env, "stats", "--db", b.dsn, "--json=false")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "table:") {
		t.Fatalf("stats --json=false should beat OUTBOX_JSON=true: %s", r)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     []string
		usage    string   // the "Usage: ..." prefix
		mentions []string // flags and variables the text must name
	}{
		{[]string{"migrate"}, "Usage: outbox migrate", []string{"--db DSN", "OUTBOX_DB", "--table", "OUTBOX_TABLE", "OUTBOX_INBOX_TABLE"}},
		{[]string{"relay"}, "Usage: outbox relay", []string{"--broker URL", "OUTBOX_BROKER", "--batch N", "OUTBOX_BATCH",
			"default 500", "--interval", "--max-retries", "--retry-base", "--retry-max", "--publish-timeout", "--log-format",
			"--log-level", "--source", "--webhook-secret", "OUTBOX_WEBHOOK_SECRET", "--webhook-timeout", "--concurrency", "SIGTERM"}},
		{[]string{"stats"}, "Usage: outbox stats", []string{"--json", "OUTBOX_JSON", "OUTBOX_DB"}},
		{[]string{"dead"}, "Usage: outbox dead", []string{"list", "show", "retry", "drop", "OUTBOX_"}},
		{[]string{"dead", "list"}, "Usage: outbox dead list", []string{"--topic", "--limit", "--after-id", "--json", "OUTBOX_LIMIT", "DEAD_AT"}},
		{[]string{"dead", "show"}, "Usage: outbox dead show", []string{"MSG_ID", "OUTBOX_DB"}},
		{[]string{"dead", "retry"}, "Usage: outbox dead retry", []string{"--all", "--topic", "OUTBOX_TOPIC"}},
		{[]string{"dead", "drop"}, "Usage: outbox dead drop", []string{"--all", "--yes", "command line only"}},
		{[]string{"cleanup"}, "Usage: outbox cleanup", []string{"--older-than DURATION", "--inbox-older-than DURATION", "required", "--batch", "--max-batches", "OUTBOX_OLDER_THAN", "OUTBOX_INBOX_OLDER_THAN"}},
		{[]string{"version"}, "Usage: outbox version", nil},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			a := runCLI(t, nil, append(tc.args, "--help")...)
			b := runCLI(t, nil, append([]string{"help"}, tc.args...)...)
			c := runCLI(t, nil, append(tc.args, "-h")...)
			for _, r := range []result{a, b, c} {
				if r.code != 0 || r.stderr != "" {
					t.Fatalf("help: %s", r)
				}
			}
			if a.stdout != b.stdout || a.stdout != c.stdout {
				t.Errorf("'X --help', 'help X' and 'X -h' differ:\n%s\n---\n%s", a.stdout, b.stdout)
			}
			want := append([]string{tc.usage, "Example:"}, tc.mentions...)
			if tc.args[0] != "version" { // which has no flags
				want = append(want, "environment as OUTBOX_", "wins over the variable")
			}
			for _, w := range want {
				if !strings.Contains(a.stdout, w) {
					t.Errorf("help lacks %q:\n%s", w, a.stdout)
				}
			}
		})
	}
	t.Run("top level", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"--help"}, {"help"}, {"-h"}} {
			r := runCLI(t, nil, args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("%v: %s", args, r)
			}
			want := []string{"migrate", "relay", "stats", "dead", "cleanup", "demo", "bench", "version", "OUTBOX_DB", "Example:", "discard:", "http(s)://",
				"dead's --all and --yes, which only the command line sets"}
			for scheme := range brokers.Adapters {
				if scheme == "tls" {
					continue // NATS over TLS, like amqps, rediss, mqtts below
				}
				if _, tls := brokers.Adapters[strings.TrimSuffix(scheme, "s")]; !tls || !strings.HasSuffix(scheme, "s") { // not amqps, rediss, mqtts: TLS forms of the same broker
					want = append(want, scheme+"://")
				}
			}
			for _, w := range want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("%v lacks %q:\n%s", args, w, r.stdout)
				}
			}
		}
		r := runCLI(t, nil)
		if r.code != 2 || !strings.Contains(r.stderr, "Usage: outbox <command>") || r.stdout != "" {
			t.Errorf("no arguments: %s", r)
		}
	})
	t.Run("help of an unknown command", func(t *testing.T) {
		t.Parallel()
		checkError(t, runCLI(t, nil, "help", "nope"), 2, `unknown command "nope"`)
	})
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := mustRun(t, "version")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 4 || lines[0] != "outbox devel" && !strings.HasPrefix(lines[0], "outbox v") ||
		!strings.HasPrefix(lines[1], "commit: ") || !strings.HasPrefix(lines[2], "built:  ") || !strings.HasPrefix(lines[3], "go:     go1.") {
		t.Fatalf("version: %q", r.stdout)
	}
	if r2 := mustRun(t, "--version"); r2.stdout != r.stdout {
		t.Fatalf("--version: %q", r2.stdout)
	}
}

// A value a flag cannot take gets one plain line naming the flag with the
// dashes the usage text shows and saying what the flag accepts, whether the
// value came from the command line or from the environment.
func TestBadFlagValueMessage(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:" + filepath.Join(t.TempDir(), "x.db")
	relay := []string{"relay", "--db", sqlite, "--broker", "discard:"}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"whole number", nil, append(relay, "--batch", "abc"),
			`outbox: relay: invalid value "abc" for --batch: use a whole number (see 'outbox relay --help')`},
		{"whole number, with =", nil, append(relay, "--batch=abc"),
			`outbox: relay: invalid value "abc" for --batch: use a whole number (see 'outbox relay --help')`},
		{"a value that reads like a flag message", nil, append(relay, "--batch", "for flag -x"),
			`outbox: relay: invalid value "for flag -x" for --batch: use a whole number (see 'outbox relay --help')`},
		{"out of range", nil, append(relay, "--batch", "99999999999999999999"),
			`outbox: relay: invalid value "99999999999999999999" for --batch: value out of range (see 'outbox relay --help')`},
		{"duration", nil, append(relay, "--interval", "soon"),
			`outbox: relay: invalid value "soon" for --interval: use a duration such as 500ms, 30s, 10m or 168h (see 'outbox relay --help')`},
		{"bool", nil, []string{"stats", "--db", sqlite, "--json=perhaps"},
			`outbox: stats: invalid value "perhaps" for --json: use true or false (see 'outbox stats --help')`},
		{"id", nil, []string{"dead", "list", "--db", sqlite, "--after-id", "last"},
			`outbox: dead list: invalid value "last" for --after-id: use a whole number (see 'outbox dead list --help')`},
		{"missing value", nil, []string{"stats", "--db"},
			`outbox: stats: flag needs an argument: --db (see 'outbox stats --help')`},
		{"from the environment", []string{"OUTBOX_BATCH=abc"}, relay,
			`outbox: relay: invalid value "abc" in OUTBOX_BATCH (read for --batch): use a whole number (see 'outbox relay --help')`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, tc.env, tc.args...)
			if r.code != 2 || r.stderr != tc.want+"\n" || r.stdout != "" {
				t.Errorf("got %s\nwant exit 2 and stderr\n%s", r, tc.want)
			}
		})
	}
}

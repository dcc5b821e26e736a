package main

import (
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/relaycmd"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// writeConfig writes a config file and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// printedTable runs outbox migrate --print, which connects to nothing, and
// returns the outbox table its SQL creates.
func printedTable(t *testing.T, env []string, args ...string) string {
	t.Helper()
	r := runCLI(t, env, append([]string{"migrate", "--print", "--dialect", "sqlite"}, args...)...)
	if r.code != 0 {
		t.Fatalf("outbox migrate --print %s: %s", strings.Join(args, " "), r)
	}
	for _, m := range regexp.MustCompile(`CREATE TABLE IF NOT EXISTS "?([a-z_]+)"?`).FindAllStringSubmatch(r.stdout, -1) {
		if !strings.HasSuffix(m[1], "_migrations") && m[1] != "consumed_msg" {
			return m[1]
		}
	}
	t.Fatalf("no CREATE TABLE of the outbox table in:\n%s", r.stdout)
	return ""
}

// TestConfigFilePrecedence: a flag wins over its variable, which wins over
// the config file, which wins over the default; in the file, the command's
// section wins over the top level.
func TestConfigFilePrecedence(t *testing.T) {
	t.Parallel()
	top := writeConfig(t, "table: file_top\n")
	both := writeConfig(t, "table: file_top\nmigrate:\n  table: file_section\n")
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, nil, "outbox"},
		{nil, []string{"--config", top}, "file_top"},
		{[]string{"OUTBOX_CONFIG=" + top}, nil, "file_top"},
		{nil, []string{"--config", both}, "file_section"},
		{[]string{"OUTBOX_TABLE=env_t"}, []string{"--config", both}, "env_t"},
		{[]string{"OUTBOX_TABLE=env_t", "OUTBOX_CONFIG=" + both}, []string{"--table", "flag_t"}, "flag_t"},
		{[]string{"OUTBOX_CONFIG=/nonexistent.yaml"}, []string{"--config", top}, "file_top"},
	} {
		if got := printedTable(t, c.env, c.args...); got != c.want {
			t.Errorf("env %q, args %q: table %q, want %q", c.env, c.args, got, c.want)
		}
	}
}

func TestConfigFileErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cmd  []string
		file string
		want []string
	}{
		{[]string{"relay"}, "db: sqlite:x.db\nrelay:\n  broker: discard\n  bach: 5\n",
			[]string{"relay: config file ", ", line 4: relay: unknown key \"bach\"; did you mean \"batch\"?"}},
		{[]string{"stats"}, "dbb: sqlite:x.db\n", []string{`line 1: unknown key "dbb"; did you mean "db"?`}},
		{[]string{"stats"}, "relay:\n  batch: 5\nstat:\n  json: true\n", []string{`line 3: unknown key "stat"; did you mean "stats"?`}},
		{[]string{"cleanup"}, "cleanup:\n  max-batch: 3\n",
			[]string{"line 2: cleanup: max-batch is not a flag of cleanup; it is relay's (put it under relay:)"}},
		{[]string{"stats"}, "dead:\n  list:\n    older-than: 1h\n",
			[]string{"line 3: dead: list: older-than is not a flag of dead list; it is cleanup's (put it under cleanup:)"}},
		{[]string{"stats"}, "batch: 100\n",
			[]string{"line 1: batch is not one flag in every command that has it (relay, cleanup, bench); put it under relay: or cleanup: or bench:"}},
		{[]string{"stats"}, "addr: :8080\n", []string{"line 1: addr is a flag of console only; put it under console:"}},
		{[]string{"relay"}, "relay:\n  batch: lots\n", []string{"line 2: relay: batch: use a whole number"}},
		{[]string{"relay"}, "relay:\n  interval: 5\n", []string{"line 2: relay: interval: use a duration such as 500ms"}},
		{[]string{"relay"}, "relay:\n  no-watch: yes\n", []string{"line 2: relay: no-watch: use true or false"}},
		{[]string{"relay"}, "relay:\n  broker: [a, b]\n", []string{"line 2: relay: broker: expected a single value, not a list or mapping"}},
		{[]string{"stats"}, "relay:\n  batch: 5\nrelay:\n  batch: 6\n", []string{"line 3: relay is set twice (first at line 1)"}},
		{[]string{"stats"}, "dead:\n  lst:\n    limit: 5\n", []string{`line 2: dead: unknown subcommand "lst"; did you mean "list"?`}},
		{[]string{"stats"}, "dead:\n  drop:\n    yes: true\n", []string{"line 3: dead: drop: yes is read from the command line only (--yes)"}},
		{[]string{"stats"}, "migrate:\n  print: true\n", []string{"line 2: migrate: print is read from the command line only"}},
		{[]string{"stats"}, "config: other.yaml\n", []string{"line 1: config: a config file cannot name another one"}},
		{[]string{"stats"}, "- db\n", []string{"line 1: the file must be a mapping of keys to values"}},
		{[]string{"stats"}, "db: [\n", []string{"not YAML: "}},
	} {
		path := writeConfig(t, c.file)
		r := runCLI(t, nil, append(c.cmd, "--config", path)...)
		checkError(t, r, 2, append(c.want, path)...)
	}
	r := runCLI(t, nil, "stats", "--config", "/nonexistent/outbox.yaml")
	checkError(t, r, 2, "stats: config file: open /nonexistent/outbox.yaml: no such file or directory")
	r = runCLI(t, []string{"OUTBOX_CONFIG=/nonexistent/outbox.yaml"}, "stats")
	checkError(t, r, 2, "no such file or directory")
}

// TestConfigFileNeverShowsAValue: the errors about a file with secrets in it
// never show them, and a DSN from the file is masked as one from a flag is.
func TestConfigFileNeverShowsAValue(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-s3cret"
	for _, c := range []struct {
		cmd  []string
		file string
		code int
	}{
		{[]string{"stats"}, "db: postgres://app:" + secret + "@127.0.0.1:1/app\n", 1},
		{[]string{"relay"}, "relay:\n  webhook-secret: " + secret + "\n  batch: " + secret + "\n", 2},
		{[]string{"relay"}, "relay:\n  max-retries: " + secret + "\n", 2},
		{[]string{"relay"}, "webhok-secret: " + secret + "\n", 2},
		{[]string{"relay"}, "relay:\n  webhook-secret: " + secret + "\n  retry-base: x" + secret + "\n", 2},
		{[]string{"relay"}, "relay:\n  webhook-secret: " + secret + "\n    x: [" + secret + "\n", 2},
		{[]string{"bench"}, "bench:\n  webhook-timeout: " + secret + "\n", 2},
	} {
		r := runCLI(t, nil, append(c.cmd, "--config", writeConfig(t, c.file))...)
		if r.code != c.code || strings.Contains(r.stderr+r.stdout, secret) || strings.Contains(r.stderr+r.stdout, "s3cret") {
			t.Errorf("outbox %s with\n%s: exit %d (want %d), or the secret shown:\n%s", c.cmd[0], c.file, r.code, c.code, r)
		}
	}
}

// TestConfigFileBenchAndDemo: bench and demo read their own section of a
// file given on their command line, not the top level (a file set up for the
// relay must not aim them at its database) nor OUTBOX_CONFIG.
func TestConfigFileBenchAndDemo(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "db: sqlite:relay.db\nbench:\n  messages: 10\n")
	checkError(t, runCLI(t, nil, "bench", "--config", path), 2, "bench: missing --db")
	checkError(t, runCLI(t, []string{"OUTBOX_CONFIG=/nonexistent.yaml"}, "bench"), 2, "bench: missing --db")
	bad := writeConfig(t, "demo:\n  lang: 5\n  dir: [x]\n")
	checkError(t, runCLI(t, nil, "demo", "--config", bad), 2, "line 3: demo: dir: expected a single value")
}

// TestDeployConfigFile: deploy/outbox.yaml is a config file every command
// reads, and the relay takes from it what it says.
func TestDeployConfigFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(deployDir, "outbox.yaml")
	cf, err := cli.LoadConfigFile(path, cli.AllFlagSets())
	if err != nil {
		t.Fatal(err)
	}
	if cf.Top["db"].Value == "" || len(cf.Sections["relay"]) < 5 || len(cf.Sections["cleanup"]) == 0 {
		t.Fatalf("%s: top level %v, sections %v: expected db, relay: and cleanup:", path, cf.Top, cf.Sections)
	}
	f := cli.CommandFlagSet(relaycmd.Run)
	if _, err := f.Parse([]string{"--config", path}); err != nil {
		t.Fatalf("outbox relay --config %s: %v", path, err)
	}
	fresh := cli.CommandFlagSet(relaycmd.Run)
	for name, e := range cf.Sections["relay"] {
		if err := fresh.Lookup(name).Value.Set(e.Value); err != nil { // "10m" reads as "10m0s"
			t.Fatal(err)
		}
		if got, want := f.Lookup(name).Value.String(), fresh.Lookup(name).Value.String(); got != want {
			t.Errorf("relay --%s = %q, the file says %q", name, got, e.Value)
		}
	}
	if got := f.Lookup("db").Value.String(); got != cf.Top["db"].Value {
		t.Errorf("relay --db = %q, the file says %q", got, cf.Top["db"].Value)
	}
}

// TestNoConfigKeyMeansTwoThings: a top-level key of a config file sets one
// flag, with one meaning, in every command it sets; a flag whose variable
// differs between commands (cleanup's --batch) is set only in a section.
func TestNoConfigKeyMeansTwoThings(t *testing.T) {
	t.Parallel()
	sets := cli.AllFlagSets()
	shared := cli.SharedConfigKeys(sets)
	for key, holders := range shared {
		if cli.FlagSetByName(sets, key) != nil || key == "dead" {
			t.Errorf("top-level key %q is also a command's section", key)
		}
		first := holders[0].DocByName(key)
		for _, f := range holders[1:] {
			d := f.DocByName(key)
			if d.Usage != first.Usage && !sameMeaning[key] {
				t.Errorf("top-level key %s means two things:\n  %s: %s\n  %s: %s", key, holders[0].Name(), first.Usage, f.Name(), d.Usage)
			}
			if d.EnvVar() != first.EnvVar() {
				t.Errorf("top-level key %s reads %s in %s and %s in %s", key, first.EnvVar(), holders[0].Name(), d.EnvVar(), f.Name())
			}
		}
	}
	for _, k := range []string{"db", "table", "broker", "db-tls-ca", "max-batch"} {
		if len(shared[k]) == 0 {
			t.Errorf("%s is not a top-level key", k)
		}
	}
	for _, k := range []string{"batch", "addr", "config", "yes", "all", "print", "messages"} {
		if _, ok := shared[k]; ok {
			t.Errorf("%s is a top-level key; it means two things or is for the command line only", k)
		}
	}
	if n := len(shared["db"]); n < 8 {
		t.Errorf("db sets %d commands", n)
	}
}

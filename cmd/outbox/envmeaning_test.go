package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// flagTables runs every command's --help in this process and returns, per
// command, its flags' usage text and variable, as the usage text lists them.
func flagTables(t *testing.T) map[string][]helpFlag {
	t.Helper()
	tables := map[string][]helpFlag{}
	for _, c := range [][]string{{"bench"}, {"cleanup"}, {"dead", "list"}, {"dead", "show"}, {"dead", "retry"},
		{"dead", "drop"}, {"console"}, {"demo"}, {"migrate"}, {"relay"}, {"stats"}, {"version"}} {
		var out, errOut bytes.Buffer
		if code := run(t.Context(), append(c, "--help"), &out, &errOut); code != 0 {
			t.Fatalf("outbox %s --help: exit %d: %s", strings.Join(c, " "), code, errOut.String())
		}
		tables[strings.Join(c, " ")] = parseHelpFlags(out.String())
	}
	return tables
}

type helpFlag struct{ name, usage, env string }

var (
	helpFlagLine = regexp.MustCompile(`^  --([a-z0-9-]+)`)
	helpEnv      = regexp.MustCompile(`env (OUTBOX_[A-Z0-9_]+)\)$`)
)

func parseHelpFlags(help string) []helpFlag {
	var flags []helpFlag
	lines := strings.Split(help, "\n")
	for i := 0; i+1 < len(lines); i++ {
		m := helpFlagLine.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		// "required; " says whether a command needs the flag, not what it means.
		usage := strings.Replace(strings.TrimSpace(lines[i+1]), "(required; env ", "(env ", 1)
		f := helpFlag{name: m[1], usage: usage}
		if e := helpEnv.FindStringSubmatch(usage); e != nil {
			f.env = e[1]
		}
		flags = append(flags, f)
	}
	return flags
}

// sameMeaning are flags whose usage text differs between commands although
// they mean one thing: --topic narrows a command to a topic, --json prints
// JSON instead of a table, --log-level says what the relay's debug lines are.
var sameMeaning = map[string]bool{"topic": true, "json": true, "log-level": true}

// TestNoVariableMeansTwoThings: across every command, an OUTBOX_ variable
// sets one flag, with one meaning (the same usage text, or a flag of
// sameMeaning).
func TestNoVariableMeansTwoThings(t *testing.T) {
	t.Parallel()
	type use struct{ cmd, flag, usage string }
	seen := map[string]use{}
	n := 0
	for cmd, flags := range flagTables(t) {
		for _, f := range flags {
			if f.env == "" {
				continue
			}
			n++
			u := use{cmd, f.name, f.usage}
			prev, ok := seen[f.env]
			if !ok {
				seen[f.env] = u
				continue
			}
			if prev.flag != u.flag || prev.usage != u.usage && !sameMeaning[u.flag] {
				t.Errorf("%s means two things:\n  outbox %s --%s: %s\n  outbox %s --%s: %s",
					f.env, prev.cmd, prev.flag, prev.usage, cmd, u.flag, u.usage)
			}
		}
	}
	if n < 20 || seen["OUTBOX_DB"].flag != "db" || seen["OUTBOX_DB_TLS_CA"].flag != "db-tls-ca" {
		t.Fatalf("the usage texts list %d variables; OUTBOX_DB %v: the parser misses them", n, seen["OUTBOX_DB"])
	}
}

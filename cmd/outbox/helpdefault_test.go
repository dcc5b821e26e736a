package main

import (
	"bytes"
	"flag"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"strconv"
	"strings"
	"testing"
)

// TestHelpShowsTheRealDefault: for every flag of every command, the default
// the usage text shows is the flag's default (flag.Flag.DefValue), which is
// what the flag holds before parsing; and the usage text prints it on that
// flag's own entry. (bench's --help once showed the table defaults on the
// wrong flags.)
func TestHelpShowsTheRealDefault(t *testing.T) {
	t.Parallel()
	sets := cli.AllFlagSets()
	n := 0
	for _, f := range sets {
		var help bytes.Buffer
		f.PrintUsage(&help)
		entries := helpEntries(help.String())
		for _, d := range f.Docs() {
			fl := f.Lookup(d.Name)
			if fl == nil {
				t.Errorf("outbox %s: --%s is documented but not defined", f.Name(), d.Name)
				continue
			}
			n++
			want := fl.DefValue
			if _, isString := fl.Value.(flag.Getter).Get().(string); isString {
				want = strconv.Quote(want)
			}
			if isBool(fl) && want == "false" {
				want = ""
			}
			if d.Def != want {
				t.Errorf("outbox %s --%s: the usage text's default is %s, the flag's %s", f.Name(), d.Name, d.Def, want)
			}
			if got := fl.Value.String(); got != fl.DefValue {
				t.Errorf("outbox %s --%s: holds %q before parsing, its default says %q", f.Name(), d.Name, got, fl.DefValue)
			}
			entry, ok := entries[d.Name]
			shown := d.Def != "" && d.Def != `""` && d.Def != "0s" && !d.Required
			switch {
			case !ok:
				t.Errorf("outbox %s --help lists no --%s", f.Name(), d.Name)
			case shown && !strings.Contains(entry, "default "+d.Def):
				t.Errorf("outbox %s --help: --%s's entry lacks \"default %s\":\n%s", f.Name(), d.Name, d.Def, entry)
			case !shown && strings.HasPrefix(entry[strings.LastIndex(entry, " (")+2:], "default "):
				t.Errorf("outbox %s --help: --%s's entry shows a default it does not have:\n%s", f.Name(), d.Name, entry)
			}
		}
	}
	if n < 100 {
		t.Fatalf("%d flags checked; the collector misses commands", n)
	}
}

func isBool(fl *flag.Flag) bool {
	b, ok := fl.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// helpEntries maps each flag of a usage text to its entry: its line and the
// usage line under it.
func helpEntries(help string) map[string]string {
	out := map[string]string{}
	lines := strings.Split(help, "\n")
	for i := 0; i+1 < len(lines); i++ {
		if m := helpFlagLine.FindStringSubmatch(lines[i]); m != nil {
			out[m[1]] = lines[i] + "\n" + lines[i+1]
		}
	}
	return out
}

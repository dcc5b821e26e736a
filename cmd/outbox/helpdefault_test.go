package main

import (
	"bytes"
	"flag"
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
	sets := allFlagSets()
	n := 0
	for _, f := range sets {
		var help bytes.Buffer
		f.printUsage(&help)
		entries := helpEntries(help.String())
		for _, d := range f.docs {
			fl := f.fs.Lookup(d.name)
			if fl == nil {
				t.Errorf("outbox %s: --%s is documented but not defined", f.name(), d.name)
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
			if d.def != want {
				t.Errorf("outbox %s --%s: the usage text's default is %s, the flag's %s", f.name(), d.name, d.def, want)
			}
			if got := fl.Value.String(); got != fl.DefValue {
				t.Errorf("outbox %s --%s: holds %q before parsing, its default says %q", f.name(), d.name, got, fl.DefValue)
			}
			entry, ok := entries[d.name]
			shown := d.def != "" && d.def != `""` && d.def != "0s" && !d.required
			switch {
			case !ok:
				t.Errorf("outbox %s --help lists no --%s", f.name(), d.name)
			case shown && !strings.Contains(entry, "default "+d.def):
				t.Errorf("outbox %s --help: --%s's entry lacks \"default %s\":\n%s", f.name(), d.name, d.def, entry)
			case !shown && strings.HasPrefix(entry[strings.LastIndex(entry, " (")+2:], "default "):
				t.Errorf("outbox %s --help: --%s's entry shows a default it does not have:\n%s", f.name(), d.name, entry)
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

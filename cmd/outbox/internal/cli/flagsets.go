package cli

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"
)

// flagSetCollector is the stdout of a run function called only for its flag
// set: parse hands the set over and returns errCollected before it reads
// the command line, the environment or a file.
type flagSetCollector struct {
	io.Writer
	set *FlagSet
}

var errCollected = errors.New("flag set collected")

// collect hands f over and reports whether f's run function was called only
// for it.
func (f *FlagSet) collect() bool {
	c, ok := f.stdout.(*flagSetCollector)
	if ok {
		c.set = f
	}
	return ok
}

// CommandFlagSet returns the flag set of the command run, nil for one that
// parses no flags.
func CommandFlagSet(run func(context.Context, []string, io.Writer, io.Writer) error) *FlagSet {
	c := &flagSetCollector{Writer: io.Discard}
	if err := run(context.Background(), nil, c, io.Discard); !errors.Is(err, errCollected) {
		return nil
	}
	c.set.stdout = io.Discard
	return c.set
}

// AllFlagSets returns the flag set of every command that parses flags, in
// the order "outbox help" lists them. The command sets it in an init
// function; Parse checks a config file against the sets it returns.
var AllFlagSets func() []*FlagSet

// FlagSetByName returns the flag set of the command name ("relay",
// "dead list") among sets, or nil.
func FlagSetByName(sets []*FlagSet, name string) *FlagSet {
	for _, f := range sets {
		if f.Name() == name {
			return f
		}
	}
	return nil
}

// DocByName returns the doc of flag name, or nil.
func (f *FlagSet) DocByName(name string) *FlagDoc {
	for _, d := range f.docs {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// TakesFile reports whether the value of flag d is a path to a file.
func (d *FlagDoc) TakesFile() bool {
	switch d.Placeholder {
	case "PATH", "FILE":
		return true
	}
	return false
}

// TakesDir reports whether the value of flag d is a directory.
func (d *FlagDoc) TakesDir() bool { return d.Placeholder == "DIR" }

// flagValues are the values of flags that take one of a few words, where the
// placeholder does not list them.
var flagValues = map[string][]string{
	"log-level": {"debug", "info", "warn", "error"},
	"dialect":   {"postgres", "mysql", "mariadb", "sqlite"},
	"producer":  {"sql", "writer"},
}

// Values returns the words flag d takes, or nil when it takes anything: from
// flagValues, or from a placeholder such as "text|json".
func (d *FlagDoc) Values() []string {
	if v, ok := flagValues[d.Name]; ok {
		return v
	}
	if !strings.Contains(d.Placeholder, "|") {
		return nil
	}
	words := strings.Split(d.Placeholder, "|")
	for _, w := range words {
		if w == "" || strings.ToLower(w) != w {
			return nil // "nats|URL": a word or anything
		}
	}
	return words
}

// Docs returns the docs of f's flags in the order they were defined. A
// caller may change them before Parse.
func (f *FlagSet) Docs() []*FlagDoc { return f.docs }

// Lookup returns the named flag, or nil.
func (f *FlagSet) Lookup(name string) *flag.Flag { return f.fs.Lookup(name) }

// IsSet reports whether Parse set the named flag: on the command line, from
// its variable or from a config file.
func (f *FlagSet) IsSet(name string) bool { return f.set[name] }

// SetStderr makes f print its warnings, such as a deprecated variable's, to
// w. By default it prints none.
func (f *FlagSet) SetStderr(w io.Writer) { f.stderr = w }

// VisitAll calls fn for each of f's flags in lexical order.
func (f *FlagSet) VisitAll(fn func(*flag.Flag)) { f.fs.VisitAll(fn) }

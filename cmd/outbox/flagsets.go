package main

import (
	"context"
	"errors"
	"io"
	"strings"
)

// flagSetCollector is the stdout of a run function called only for its flag
// set: parse hands the set over and returns errCollected before it reads
// the command line, the environment or a file.
type flagSetCollector struct {
	io.Writer
	set *flagSet
}

var errCollected = errors.New("flag set collected")

// collect hands f over and reports whether f's run function was called only
// for it.
func (f *flagSet) collect() bool {
	c, ok := f.stdout.(*flagSetCollector)
	if ok {
		c.set = f
	}
	return ok
}

// commandFlagSet returns the flag set of the command run, nil for one that
// parses no flags.
func commandFlagSet(run func(context.Context, []string, io.Writer, io.Writer) error) *flagSet {
	c := &flagSetCollector{Writer: io.Discard}
	if err := run(context.Background(), nil, c, io.Discard); !errors.Is(err, errCollected) {
		return nil
	}
	return c.set
}

// allFlagSets returns the flag set of every command that parses flags, in
// the order "outbox help" lists them ("dead list", "dead show", ... in
// place of "dead"). It is set in init, as commands, which it reads, lists
// the commands that call it.
var allFlagSets func() []*flagSet

func init() { allFlagSets = collectFlagSets }

func collectFlagSets() []*flagSet {
	var sets []*flagSet
	add := func(run func(context.Context, []string, io.Writer, io.Writer) error) {
		if f := commandFlagSet(run); f != nil {
			sets = append(sets, f)
		}
	}
	for _, c := range commands {
		switch {
		case c.run == nil:
		case c.name == "dead":
			for _, d := range deadCommands {
				add(d.run)
			}
		default:
			add(c.run)
		}
	}
	return sets
}

// flagSetByName returns the flag set of the command name ("relay",
// "dead list") among sets, or nil.
func flagSetByName(sets []*flagSet, name string) *flagSet {
	for _, f := range sets {
		if f.name() == name {
			return f
		}
	}
	return nil
}

// docByName returns the doc of flag name, or nil.
func (f *flagSet) docByName(name string) *flagDoc {
	for _, d := range f.docs {
		if d.name == name {
			return d
		}
	}
	return nil
}

// takesFile reports whether the value of flag d is a path to a file.
func (d *flagDoc) takesFile() bool {
	switch d.placeholder {
	case "PATH", "FILE":
		return true
	}
	return false
}

// takesDir reports whether the value of flag d is a directory.
func (d *flagDoc) takesDir() bool { return d.placeholder == "DIR" }

// flagValues are the values of flags that take one of a few words, where the
// placeholder does not list them.
var flagValues = map[string][]string{
	"log-level": {"debug", "info", "warn", "error"},
	"dialect":   {"postgres", "mysql", "mariadb", "sqlite"},
	"producer":  {"sql", "writer"},
}

// values returns the words flag d takes, or nil when it takes anything: from
// flagValues, or from a placeholder such as "text|json".
func (d *flagDoc) values() []string {
	if v, ok := flagValues[d.name]; ok {
		return v
	}
	if !strings.Contains(d.placeholder, "|") {
		return nil
	}
	words := strings.Split(d.placeholder, "|")
	for _, w := range words {
		if w == "" || strings.ToLower(w) != w {
			return nil // "nats|URL": a word or anything
		}
	}
	return words
}

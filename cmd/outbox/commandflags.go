package main

import (
	"context"
	"io"

	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
)

// cli.AllFlagSets is set here, in init, as commands, which it reads, lists
// the commands that call it.
func init() { cli.AllFlagSets = collectFlagSets }

// collectFlagSets returns the flag set of every command that parses flags,
// in the order "outbox help" lists them ("dead list", "dead show", ... in
// place of "dead").
func collectFlagSets() []*cli.FlagSet {
	var sets []*cli.FlagSet
	add := func(run func(context.Context, []string, io.Writer, io.Writer) error) {
		if f := cli.CommandFlagSet(run); f != nil {
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

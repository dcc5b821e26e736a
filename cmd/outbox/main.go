// Command outbox runs and administers a transactional outbox: it creates the
// tables, relays messages to a broker, and lets a person inspect, retry and
// clean up messages. Run "outbox help" for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/bench"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/demo"
	"github.com/outbox-go/outbox/cmd/outbox/internal/relaycmd"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
)

// command is one subcommand. Every run function parses its own arguments, so
// that "outbox help X" is simply "outbox X --help".
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands in the order "outbox help" lists them.
var commands = []command{
	{"migrate", "create or upgrade the outbox tables (safe to repeat)", runMigrate},
	{"relay", "move messages from the outbox table to a broker until SIGTERM/SIGINT", relaycmd.Run},
	{"stats", "show pending, oldest pending age, sent and dead messages, per topic", runStats},
	{"dead", "list, show, retry or drop messages that ran out of retries", runDead},
	{"cleanup", "delete SENT messages and inbox records older than a given age", runCleanup},
	{"console", "serve the operator's web console: backlog, DEAD messages, failure groups", relaycmd.RunConsole},
	{"demo", "run the transfer scenario end to end on embedded services, no set-up", demo.Run},
	{"bench", "measure the relay's throughput", bench.Run},
	{"version", "print the version of this binary", runVersion},
	{"completion", "print a shell completion script: outbox completion bash|zsh|fish", runCompletion},
	{"help", "print help for a command: outbox help relay", nil},
}

func main() {
	tuneGC(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one ends the process at once.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args and returns the exit status: 0 on success
// and --help, 1 on an error, 2 on a usage mistake.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(stderr, "outbox: internal error: %s; please report it with the command you ran\n", cli.TermText(cli.OneLine(cli.Scrub(fmt.Sprint(p)))))
			code = 1
		}
	}()
	if len(args) == 0 {
		printUsage(stderr)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help":
		printUsage(stdout)
		return 0
	case "-version", "--version":
		name = "version"
	case "help":
		if len(rest) == 0 {
			printUsage(stdout)
			return 0
		}
		// "outbox help dead list" is "outbox dead list --help".
		name, rest = rest[0], append(rest[1:len(rest):len(rest)], "--help")
		if name == "help" {
			printUsage(stdout)
			return 0
		}
	}
	cmd := lookup(name)
	if cmd == nil {
		msg := fmt.Sprintf("unknown command %q", name)
		if strings.HasPrefix(name, "-") {
			msg = fmt.Sprintf("unknown flag %q; flags go after the command, e.g. outbox relay --db DSN", name)
		} else {
			var names []string
			for _, c := range commands {
				names = append(names, c.name)
			}
			if near := cli.Closest(name, names); near != "" {
				msg += fmt.Sprintf("; did you mean %q?", near)
			}
		}
		return report(stderr, cli.Usagef("outbox help", "%s", msg))
	}
	return report(stderr, cmd.run(ctx, rest, stdout, stderr))
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name && commands[i].run != nil {
			return &commands[i]
		}
	}
	return nil
}

// report prints err as one line on stderr and returns the exit status.
func report(stderr io.Writer, err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	}
	msg := cli.TermText(cli.OneLine(cli.Scrub(err.Error())))
	// The core's messages start with "outbox: " too; say it once.
	for {
		rest, ok := strings.CutPrefix(msg, "outbox: ")
		if !ok {
			break
		}
		msg = rest
	}
	msg = strings.ReplaceAll(msg, ": outbox: ", ": ")
	var ue *cli.UsageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "outbox: %s (see '%s')\n", msg, ue.Hint())
		return 2
	}
	fmt.Fprintf(stderr, "outbox: %s\n", msg)
	return 1
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, `outbox runs and administers a transactional outbox (tables "outbox" and "consumed_msg").

Usage: outbox <command> [flags] [arguments]

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprintf(w, `
Databases (--db): postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db,
sqlite:path/to/file.db. Brokers (--broker): nats://host:4222, amqp://user:pass@host:5672/vhost,
kafka://host:9092[,host2:9092], redis://host:6379/0, mqtt://host:1883, http(s)://host/path
(webhook), discard: (acknowledge and drop, for tests).

%s
demo and bench read no variable, so that a shell set up for the relay does not aim them at
its database, tables or broker; nor do dead's --all and --yes, which only the command line sets.

The garbage collector runs with GOGC=400 unless GOGC is set: the relay's heap is small, and
at Go's default of 100 collecting took half of the relay's own CPU.

Run 'outbox <command> --help' (or 'outbox help <command>') for the flags of a command.

Example:
  export OUTBOX_DB=postgres://app:secret@127.0.0.1:5432/app
  outbox migrate
  outbox relay --broker https://example.com/events
`, cli.EnvNote)
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/admin"
	"github.com/outbox-go/outbox/internal/redact"
)

var deadCommands = []command{
	{"list", "list DEAD messages, oldest first", runDeadList},
	{"show", "show one message with its payload and headers (any status)", runDeadShow},
	{"retry", "move DEAD messages back to NEW so the relay publishes them again", runDeadRetry},
	{"drop", "delete DEAD messages", runDeadDrop},
}

func runDead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return cli.Usagef("outbox dead --help", "dead: missing subcommand; use list, show, retry or drop")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		printDeadUsage(stdout)
		return flag.ErrHelp
	}
	for _, c := range deadCommands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	if strings.HasPrefix(args[0], "-") {
		return cli.Usagef("outbox dead --help", "dead: give the subcommand (list, show, retry or drop) before the flags")
	}
	return cli.Usagef("outbox dead --help", "dead: unknown subcommand %q; use list, show, retry or drop", args[0])
}

func printDeadUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: outbox dead <subcommand> --db DSN [flags] [arguments]\n\n"+
		"Work on the messages that ran out of retries (status DEAD), which the relay keeps for a person.\n\nSubcommands:\n")
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range deadCommands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s\n\nRun 'outbox dead <subcommand> --help' for its flags.\n\n"+
		"Example:\n  outbox dead list --db sqlite:app.db\n  outbox dead retry --db sqlite:app.db order-42:OrderPaid\n", cli.EnvNote)
}

const deadAtNote = "DEAD_AT is the row's dead_at: when the relay gave up on it (database clock). For a row\n" +
	"that became DEAD before schema version 4 (PostgreSQL) or 2 (MariaDB/MySQL, SQLite), it is the\n" +
	"time its last attempt came due."

func runDeadList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := cli.NewFlagSet("outbox dead list", "--db DSN [flags]",
		"List DEAD messages, oldest first, with their last error (truncated; see 'outbox dead show').", stdout)
	db := dbopen.AddFlags(f)
	var topic string
	var limit int
	var afterID int64
	var asJSON bool
	f.StringVar(&topic, "topic", "", "TOPIC", "list only this topic")
	f.IntVar(&limit, "limit", 100, "N", "most messages listed, 1..10000")
	f.Int64Var(&afterID, "after-id", 0, "ID", "list messages whose id is above this one (the next page)")
	f.BoolVar(&asJSON, "json", "print a JSON array instead of a table")
	f.Note(deadAtNote)
	f.Note(cli.EscapesNote)
	f.Example("outbox dead list --db sqlite:app.db --topic order.paid --limit 20")
	pos, err := f.Parse(args)
	if err != nil {
		return err
	}
	if err := cli.NoArgs(f, pos); err != nil {
		return err
	}
	switch {
	case limit < 1 || limit > 10000:
		return cli.Usagef(f.Hint(), "dead list: --limit %d is out of range; use 1..10000", limit)
	case afterID < 0:
		return cli.Usagef(f.Hint(), "dead list: --after-id %d must not be negative", afterID)
	}
	d, err := db.Open(ctx, true)
	if err != nil {
		return err
	}
	defer d.Close()
	msgs, err := d.Store.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusDead, Topic: topic, AfterID: afterID, Limit: limit})
	if err != nil {
		return fmt.Errorf("list dead messages in %s: %w", d.Where, err)
	}
	if asJSON {
		out := make([]admin.Message, 0, len(msgs))
		for _, m := range msgs {
			out = append(out, admin.MessageOf(m))
		}
		return writeJSON(stdout, out)
	}
	if len(msgs) == 0 {
		fmt.Fprintln(stdout, "no DEAD messages")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tMSG_ID\tTOPIC\tRETRIES\tDEAD_AT\tLAST_ERROR")
	for _, m := range msgs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", m.ID, cli.TermText(m.MsgID), cli.TermText(m.Topic), m.Retries,
			formatTime(m.DeadAt, time.RFC3339), truncate(cli.TermText(cli.OneLine(redact.Text(m.LastError))), 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(msgs) == limit {
		fmt.Fprintf(stderr, "there may be more: add --after-id %d for the next page\n", msgs[len(msgs)-1].ID)
	}
	return nil
}

func runDeadShow(ctx context.Context, args []string, stdout, _ io.Writer) error {
	f := cli.NewFlagSet("outbox dead show", "--db DSN [flags] MSG_ID",
		"Show every field of one message, its headers and its payload (pretty-printed). Works for a\n"+
			"message of any status, not only DEAD.", stdout)
	db := dbopen.AddFlags(f)
	var asJSON bool
	f.BoolVar(&asJSON, "json", "print one JSON object")
	f.Note(cli.EscapesNote)
	f.Example("outbox dead show --db sqlite:app.db order-42:OrderPaid")
	pos, err := f.Parse(args)
	if err != nil {
		return err
	}
	switch len(pos) {
	case 0:
		return cli.Usagef(f.Hint(), "dead show: missing MSG_ID; find one with 'outbox dead list'")
	case 1:
	default:
		return cli.Usagef(f.Hint(), "dead show: give one MSG_ID, not %d", len(pos))
	}
	d, err := db.Open(ctx, true)
	if err != nil {
		return err
	}
	defer d.Close()
	m, err := d.Store.GetMessage(ctx, pos[0])
	if errors.Is(err, outbox.ErrNotFound) {
		return fmt.Errorf("no message with msg_id %q in table %q; find one with 'outbox dead list'", pos[0], d.Store.Tables().Outbox)
	}
	if err != nil {
		return fmt.Errorf("show message %q in %s: %w", pos[0], d.Where, err)
	}
	if asJSON {
		return writeJSON(stdout, admin.MessageOf(m))
	}
	const layout = "2006-01-02T15:04:05.000Z07:00"
	tw := tabwriter.NewWriter(stdout, 0, 0, 1, ' ', 0)
	for _, row := range [][2]string{
		{"id", fmt.Sprint(m.ID)},
		{"msg_id", cli.TermText(m.MsgID)},
		{"topic", cli.TermText(m.Topic)},
		{"key", cli.TermText(orDash(m.Key))},
		{"status", m.Status.String()},
		{"retries", fmt.Sprint(m.Retries)},
		{"created_at", formatTime(m.CreatedAt, layout)},
		{"next_retry_at", formatTime(m.NextRetryAt, layout)},
		{"sent_at", formatTime(m.SentAt, layout)},
		{"dead_at", formatTime(m.DeadAt, layout)},
		{"last_error", cli.TermText(orDash(redact.Text(m.LastError)))},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", row[0], row[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(m.Headers) == 0 {
		fmt.Fprintln(stdout, "headers:       -")
	} else {
		fmt.Fprintln(stdout, "headers:")
		names := make([]string, 0, len(m.Headers))
		for k := range m.Headers {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			fmt.Fprintf(stdout, "  %s: %s\n", cli.TermText(k), cli.TermText(m.Headers[k]))
		}
	}
	fmt.Fprintln(stdout, "payload:")
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, m.Payload, "", "  "); err != nil {
		pretty.Reset()
		pretty.Write(m.Payload)
	}
	fmt.Fprintln(stdout, cli.TermBlock(pretty.String()))
	return nil
}

// deadSelection is the shared part of retry and drop: msg_ids or --all.
type deadSelection struct {
	f     *cli.FlagSet
	all   bool
	topic string
}

func addDeadSelection(f *cli.FlagSet) *deadSelection {
	s := &deadSelection{f: f}
	f.BoolVar(&s.all, "all", "select every DEAD message (of --topic, when given) instead of listing msg_ids").NoEnv = true
	f.StringVar(&s.topic, "topic", "", "TOPIC", "with --all, only this topic; with msg_ids, only those of this topic")
	return s
}

func (s *deadSelection) filter(pos []string) (outbox.DeadFilter, error) {
	switch {
	case len(pos) == 0 && !s.all:
		return outbox.DeadFilter{}, cli.Usagef(s.f.Hint(), "%s: give the msg_ids to act on, or --all (with --topic to limit it to one topic)", s.f.Name())
	case len(pos) > 0 && s.all:
		return outbox.DeadFilter{}, cli.Usagef(s.f.Hint(), "%s: give either msg_ids or --all, not both", s.f.Name())
	}
	return outbox.DeadFilter{MsgIDs: pos, All: s.all, Topic: s.topic}, nil
}

func (s *deadSelection) describe(n int64, verb string, ids []string) string {
	msg := fmt.Sprintf("%s %d DEAD %s", verb, n, plural(n, "message", "messages"))
	if s.topic != "" {
		msg += fmt.Sprintf(" of topic %q", s.topic)
	}
	if missed := int64(len(ids)) - n; len(ids) > 0 && missed > 0 {
		msg += fmt.Sprintf(" (%d of the %d msg_ids given %s not DEAD, not of the topic, or not there)",
			missed, len(ids), plural(missed, "is", "are"))
	}
	return msg
}

func runDeadRetry(ctx context.Context, args []string, stdout, _ io.Writer) error {
	f := cli.NewFlagSet("outbox dead retry", "--db DSN [flags] (MSG_ID... | --all [--topic TOPIC])",
		"Move DEAD messages back to NEW with their retry count reset, so that the relay publishes them\n"+
			"again. The retry is recorded in last_error, before the previous error.", stdout)
	db := dbopen.AddFlags(f)
	sel := addDeadSelection(f)
	f.Example("outbox dead retry --db sqlite:app.db order-42:OrderPaid order-43:OrderPaid")
	f.Example("outbox dead retry --db sqlite:app.db --all --topic order.paid")
	pos, err := f.Parse(args)
	if err != nil {
		return err
	}
	filter, err := sel.filter(pos)
	if err != nil {
		return err
	}
	d, err := db.Open(ctx, true)
	if err != nil {
		return err
	}
	defer d.Close()
	note := fmt.Sprintf("retried by operator at %s via outbox dead retry; previous error: ", time.Now().UTC().Format(time.RFC3339))
	n, err := d.Store.RetryDead(ctx, filter, note)
	if err != nil {
		return fmt.Errorf("retry dead messages in %s: %w", d.Where, err)
	}
	fmt.Fprintln(stdout, sel.describe(n, "retried", pos)+"; they are NEW again")
	return nil
}

func runDeadDrop(ctx context.Context, args []string, stdout, _ io.Writer) error {
	f := cli.NewFlagSet("outbox dead drop", "--db DSN [flags] (MSG_ID... | --all [--topic TOPIC] --yes)",
		"Delete DEAD messages for good. Only DEAD messages are deleted, whatever the msg_ids given.", stdout)
	db := dbopen.AddFlags(f)
	sel := addDeadSelection(f)
	var yes bool
	f.BoolVar(&yes, "yes", "confirm --all: without it, --all deletes nothing").NoEnv = true
	f.Note("--all and --yes are read from the command line only, never from the environment.")
	f.Example("outbox dead drop --db sqlite:app.db order-42:OrderPaid")
	f.Example("outbox dead drop --db sqlite:app.db --all --topic order.paid --yes")
	pos, err := f.Parse(args)
	if err != nil {
		return err
	}
	filter, err := sel.filter(pos)
	if err != nil {
		return err
	}
	if sel.all && !yes {
		scope := ""
		if sel.topic != "" {
			scope = fmt.Sprintf(" of topic %q", sel.topic)
		}
		return cli.Usagef(f.Hint(), "dead drop: --all deletes every DEAD message%s; add --yes to confirm (see them first with 'outbox dead list')", scope)
	}
	d, err := db.Open(ctx, true)
	if err != nil {
		return err
	}
	defer d.Close()
	n, err := d.Store.DropDead(ctx, filter)
	if err != nil {
		return fmt.Errorf("drop dead messages in %s: %w", d.Where, err)
	}
	fmt.Fprintln(stdout, sel.describe(n, "dropped", pos))
	return nil
}

func formatTime(t time.Time, layout string) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(layout)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

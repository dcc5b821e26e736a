package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"text/tabwriter"
	"time"

	"github.com/outbox-go/outbox/admin"
	"github.com/outbox-go/outbox/outboxdriver"
)

func runStats(ctx context.Context, args []string, stdout, _ io.Writer) error {
	f := cli.NewFlagSet("outbox stats", "--db DSN [flags]",
		"Show how many messages are pending (NEW), the age of the oldest pending one and how many are\n"+
			"DEAD, in total and per topic, and an estimate of how many were sent (the span of ids less the\n"+
			"pending and DEAD ones; ids never used or rows deleted in between count as sent). It reads\n"+
			"indexes only, never the sent history. On PostgreSQL also where the relays'\n"+
			"rescans start (the low-water mark): far behind the newest row means a transaction left\n"+
			"open holds it back, and every rescan walks the rows in between.", stdout)
	db := dbopen.AddFlags(f)
	var asJSON bool
	f.BoolVar(&asJSON, "json", "print one JSON object instead of a table")
	f.Note("Control characters in topics are shown as escapes such as \\x1b; --json prints them exactly, as JSON escapes.")
	f.Example("outbox stats --db mysql://app@127.0.0.1:3306/app")
	f.Example("outbox stats --db sqlite:app.db --json")
	pos, err := f.Parse(args)
	if err != nil {
		return err
	}
	if err := cli.NoArgs(f, pos); err != nil {
		return err
	}
	d, err := db.Open(ctx, true)
	if err != nil {
		return err
	}
	defer d.Close()
	st, err := d.Store.Stats(ctx)
	if err != nil {
		return fmt.Errorf("stats of %s: %w", d.Where, err)
	}
	var mark *outboxdriver.RescanMark
	if rm, ok := d.Store.(outboxdriver.RescanMarker); ok {
		m, found, err := rm.RescanMark(ctx)
		if err != nil {
			return fmt.Errorf("stats of %s: %w", d.Where, err)
		}
		if found {
			mark = &m
		}
	}
	if asJSON {
		out := statsOutput{Stats: admin.StatsOf(d.Store.Tables().Outbox, st)}
		if mark != nil {
			out.RescanMark = &rescanMarkJSON{ID: mark.ID, NewestID: mark.NewestID, BehindSeconds: mark.Behind.Seconds()}
		}
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "table:          %s (%s)\n", d.Store.Tables().Outbox, cli.TermText(d.Where))
	fmt.Fprintf(stdout, "pending:        %d\n", st.Pending)
	fmt.Fprintf(stdout, "oldest pending: %s\n", age(st.OldestPendingAge, st.Pending))
	if st.SentEstimated {
		fmt.Fprintf(stdout, "sent:           ~%d (estimate)\n", st.Sent)
	} else {
		fmt.Fprintf(stdout, "sent:           %d\n", st.Sent)
	}
	fmt.Fprintf(stdout, "dead:           %d\n", st.Dead)
	if mark != nil {
		// PostgreSQL: where the relays' rescans start. Far behind means a
		// transaction left open is holding it, and rescans walk more rows.
		fmt.Fprintf(stdout, "rescans from:   id %d of %d (first row above it written %s ago)\n",
			mark.ID, mark.NewestID, age(mark.Behind, mark.NewestID-mark.ID))
	}
	if len(st.Topics) == 0 {
		return nil
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPENDING\tOLDEST PENDING\tDEAD")
	for _, t := range st.Topics {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", cli.TermText(t.Topic), t.Pending, age(t.OldestPendingAge, t.Pending), t.Dead)
	}
	return tw.Flush()
}

// age shows a duration rounded for a person, or "-" when nothing is pending.
func age(d time.Duration, pending int64) string {
	switch {
	case pending == 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// statsOutput is what "outbox stats --json" prints: the admin API's Stats
// and, on PostgreSQL, the rescans' low-water mark.
type statsOutput struct {
	admin.Stats
	// RescanMark is PostgreSQL's low-water mark (absent elsewhere).
	RescanMark *rescanMarkJSON `json:"rescan_mark,omitempty"`
}

type rescanMarkJSON struct {
	ID            int64   `json:"id"`
	NewestID      int64   `json:"newest_id"`
	BehindSeconds float64 `json:"behind_seconds"`
}

// writeJSON prints v as indented JSON. The runes a terminal acts on and
// encoding/json leaves raw (DEL, C1 controls) are written as \u escapes:
// the same JSON value, safe on a terminal.
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(cli.JSONTermSafe(buf.Bytes()))
	return err
}

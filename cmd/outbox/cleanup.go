package main

import (
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"time"

	"github.com/outbox-go/outbox"
)

func runCleanup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := cli.NewFlagSet("outbox cleanup", "--db DSN (--older-than DURATION | --inbox-older-than DURATION) [flags]",
		"Delete SENT messages sent longer ago than --older-than, and inbox records (consumed_msg)\n"+
			"older than --inbox-older-than, in batches, until none is left or --max-batches is reached.\n"+
			"NEW and DEAD messages are never deleted.", stdout)
	db := dbopen.AddFlags(f)
	var cfg outbox.CleanerConfig
	f.DurationVar(&cfg.OlderThan, "older-than", 0, "delete SENT messages whose sent_at is older than this, e.g. 168h for a week")
	f.DurationVar(&cfg.InboxOlderThan, "inbox-older-than", 0,
		"delete inbox records, of every consumer group, consumed longer ago than this, e.g. 720h; a message that "+
			"arrives again after its record is gone is applied again, so keep them longer than any redelivery")
	f.SetStderr(stderr)
	// OUTBOX_BATCH is the relay's --batch, a different thing.
	bd := f.IntVar(&cfg.BatchSize, "batch", 1000, "N", "most rows deleted by one statement, 1..100000 (OUTBOX_BATCH, the relay's, is read too but deprecated here)")
	bd.Env, bd.DeprecatedEnv = "OUTBOX_CLEANUP_BATCH", "OUTBOX_BATCH"
	f.IntVar(&cfg.MaxBatches, "max-batches", 0, "N", "stop after this many batches of each table; 0 means until done")
	f.Float64Var(&cfg.DutyCycle, "duty-cycle", 1, "SHARE",
		"share of the time spent in DELETE statements, above 0 and at most 1: after a statement that took d, wait d×(1−SHARE)/SHARE, "+
			"so that a large backlog is deleted beside the relay without taking the disk from it; 1 means no wait")
	f.Note("Give --older-than, --inbox-older-than or both. Neither table has an index on the age, so the\n" +
		"last statement of each, the one that finds nothing more, reads the whole table.")
	f.Example("outbox cleanup --db postgres://app@127.0.0.1:5432/app --older-than 168h")
	f.Example("outbox cleanup --db postgres://app@127.0.0.1:5432/app --inbox-older-than 720h")
	f.Example("outbox cleanup --db postgres://app@127.0.0.1:5432/app --older-than 168h --duty-cycle 0.2")
	pos, err := f.Parse(args)
	if err != nil {
		return err
	}
	if err := cli.NoArgs(f, pos); err != nil {
		return err
	}
	sent, inbox := f.IsSet("older-than"), f.IsSet("inbox-older-than")
	switch {
	case !sent && !inbox:
		return cli.Usagef(f.Hint(), "cleanup: give --older-than (SENT messages), --inbox-older-than (inbox records) or both, such as --older-than 168h")
	case cfg.OlderThan < 0:
		return cli.Usagef(f.Hint(), "cleanup: --older-than %s is negative; give an age such as 168h", cfg.OlderThan)
	case cfg.InboxOlderThan < 0:
		return cli.Usagef(f.Hint(), "cleanup: --inbox-older-than %s is negative; give an age such as 720h", cfg.InboxOlderThan)
	case cfg.BatchSize < 1 || cfg.BatchSize > 100000:
		return cli.Usagef(f.Hint(), "cleanup: --batch %d is out of range; use 1..100000", cfg.BatchSize)
	case cfg.MaxBatches < 0:
		return cli.Usagef(f.Hint(), "cleanup: --max-batches %d must not be negative (0 means until done)", cfg.MaxBatches)
	case !(cfg.DutyCycle > 0 && cfg.DutyCycle <= 1):
		return cli.Usagef(f.Hint(), "cleanup: --duty-cycle %v is out of range; give a share of time above 0 and at most 1, such as 0.2", cfg.DutyCycle)
	}
	d, err := db.Open(ctx, true)
	if err != nil {
		return err
	}
	defer d.Close()
	tables := d.Store.Tables()
	if sent {
		c := cfg
		// --older-than 0s deletes every SENT message; a Cleaner reads 0 as unset.
		c.OlderThan, c.InboxOlderThan = max(cfg.OlderThan, time.Nanosecond), 0
		n, err := cleanTable(ctx, d, c, "SENT messages")
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %d SENT %s older than %s from table %q\n", n, plural(n, "message", "messages"), cfg.OlderThan, tables.Outbox)
	}
	if inbox {
		c := cfg
		c.OlderThan, c.InboxOlderThan = 0, max(cfg.InboxOlderThan, time.Nanosecond)
		n, err := cleanTable(ctx, d, c, "inbox records")
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %d inbox %s older than %s from table %q\n", n, plural(n, "record", "records"), cfg.InboxOlderThan, tables.Inbox)
	}
	return nil
}

// cleanTable runs one round of a Cleaner of cfg, which names one table's
// age, and returns how many rows it deleted there.
func cleanTable(ctx context.Context, d *dbopen.Database, cfg outbox.CleanerConfig, what string) (int64, error) {
	c, err := outbox.NewCleaner(d.Store, cfg)
	if err != nil {
		return 0, err
	}
	rep, err := c.RunOnce(ctx)
	n := rep.Sent + rep.Consumed
	switch {
	case ctx.Err() != nil:
		return n, fmt.Errorf("cleanup interrupted after deleting %d %s", n, what)
	case err != nil:
		return n, fmt.Errorf("cleanup of %s stopped after deleting %d %s: %w", d.Where, n, what, err)
	}
	return n, nil
}

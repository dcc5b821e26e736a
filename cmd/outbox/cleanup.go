package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

func runCleanup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlagSet("outbox cleanup", "--db DSN (--older-than DURATION | --inbox-older-than DURATION) [flags]",
		"Delete SENT messages sent longer ago than --older-than, and inbox records (consumed_msg)\n"+
			"older than --inbox-older-than, in batches, until none is left or --max-batches is reached.\n"+
			"NEW and DEAD messages are never deleted.", stdout)
	db := addDBFlags(f)
	var olderThan, inboxOlderThan time.Duration
	var batch, maxBatches int
	f.durationVar(&olderThan, "older-than", 0, "delete SENT messages whose sent_at is older than this, e.g. 168h for a week")
	f.durationVar(&inboxOlderThan, "inbox-older-than", 0,
		"delete inbox records, of every consumer group, consumed longer ago than this, e.g. 720h; a message that "+
			"arrives again after its record is gone is applied again, so keep them longer than any redelivery")
	f.stderr = stderr
	// OUTBOX_BATCH is the relay's --batch, a different thing.
	bd := f.intVar(&batch, "batch", 1000, "N", "most rows deleted by one statement, 1..100000 (OUTBOX_BATCH, the relay's, is read too but deprecated here)")
	bd.env, bd.deprecatedEnv = "OUTBOX_CLEANUP_BATCH", "OUTBOX_BATCH"
	f.intVar(&maxBatches, "max-batches", 0, "N", "stop after this many batches of each table; 0 means until done")
	f.note("Give --older-than, --inbox-older-than or both. Neither table has an index on the age, so the\n" +
		"last statement of each, the one that finds nothing more, reads the whole table.")
	f.example("outbox cleanup --db postgres://app@127.0.0.1:5432/app --older-than 168h")
	f.example("outbox cleanup --db postgres://app@127.0.0.1:5432/app --inbox-older-than 720h")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(f, pos); err != nil {
		return err
	}
	sent, inbox := f.set["older-than"], f.set["inbox-older-than"]
	switch {
	case !sent && !inbox:
		return usagef(f.hint(), "cleanup: give --older-than (SENT messages), --inbox-older-than (inbox records) or both, such as --older-than 168h")
	case olderThan < 0:
		return usagef(f.hint(), "cleanup: --older-than %s is negative; give an age such as 168h", olderThan)
	case inboxOlderThan < 0:
		return usagef(f.hint(), "cleanup: --inbox-older-than %s is negative; give an age such as 720h", inboxOlderThan)
	case batch < 1 || batch > 100000:
		return usagef(f.hint(), "cleanup: --batch %d is out of range; use 1..100000", batch)
	case maxBatches < 0:
		return usagef(f.hint(), "cleanup: --max-batches %d must not be negative (0 means until done)", maxBatches)
	}
	d, err := db.open(ctx, true)
	if err != nil {
		return err
	}
	defer d.Close()
	tables := d.Store.Tables()
	// drain deletes in batches with del and returns how many it deleted.
	drain := func(del func(context.Context, time.Duration, int) (int64, error), age time.Duration, what string) (int64, error) {
		var total int64
		for batches := 1; ; batches++ {
			n, err := del(ctx, age, batch)
			total += n
			if err != nil {
				if ctx.Err() != nil {
					return total, fmt.Errorf("cleanup interrupted after deleting %d %s", total, what)
				}
				return total, fmt.Errorf("cleanup of %s stopped after deleting %d %s: %w", d.where, total, what, err)
			}
			if n < int64(batch) || (maxBatches > 0 && batches >= maxBatches) {
				return total, nil
			}
			if ctx.Err() != nil {
				return total, fmt.Errorf("cleanup interrupted after deleting %d %s", total, what)
			}
		}
	}
	if sent {
		n, err := drain(d.Store.DeleteSent, olderThan, "SENT messages")
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %d SENT %s older than %s from table %q\n", n, plural(n, "message", "messages"), olderThan, tables.Outbox)
	}
	if inbox {
		n, err := drain(d.Store.DeleteConsumed, inboxOlderThan, "inbox records")
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %d inbox %s older than %s from table %q\n", n, plural(n, "record", "records"), inboxOlderThan, tables.Inbox)
	}
	return nil
}

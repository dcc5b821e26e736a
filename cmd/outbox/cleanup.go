package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

func runCleanup(ctx context.Context, args []string, stdout, _ io.Writer) error {
	f := newFlagSet("outbox cleanup", "--db DSN --older-than DURATION [flags]",
		"Delete SENT messages sent longer ago than --older-than, in batches, until none is left or\n"+
			"--max-batches is reached. NEW and DEAD messages are never deleted.", stdout)
	db := addDBFlags(f)
	var olderThan time.Duration
	var batch, maxBatches int
	f.durationVar(&olderThan, "older-than", 0, "delete SENT messages whose sent_at is older than this, e.g. 168h for a week").required = true
	f.intVar(&batch, "batch", 1000, "N", "most messages deleted by one statement, 1..100000")
	f.intVar(&maxBatches, "max-batches", 0, "N", "stop after this many batches; 0 means until done")
	f.example("outbox cleanup --db postgres://app:secret@127.0.0.1:5432/app --older-than 168h")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(f, pos); err != nil {
		return err
	}
	switch {
	case olderThan < 0:
		return usagef(f.hint(), "cleanup: --older-than %s is negative; give an age such as 168h", olderThan)
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
	var total int64
	for batches := 1; ; batches++ {
		n, err := d.Store.DeleteSent(ctx, olderThan, batch)
		total += n
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("cleanup interrupted after deleting %d SENT messages", total)
			}
			return fmt.Errorf("cleanup of %s stopped after deleting %d SENT messages: %w", d.where, total, err)
		}
		if n < int64(batch) || (maxBatches > 0 && batches >= maxBatches) {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("cleanup interrupted after deleting %d SENT messages", total)
		}
	}
	fmt.Fprintf(stdout, "deleted %d SENT %s older than %s from table %q\n", total, plural(total, "message", "messages"), olderThan, d.Store.Tables().Outbox)
	return nil
}

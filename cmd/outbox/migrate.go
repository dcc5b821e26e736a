package main

import (
	"context"
	"fmt"
	"io"
)

func runMigrate(ctx context.Context, args []string, stdout, _ io.Writer) error {
	f := newFlagSet("outbox migrate", "--db DSN [flags]",
		"Create or upgrade the outbox and inbox tables to the latest version. Safe to run again,\n"+
			"and from several processes at once.", stdout)
	db := addDBFlags(f)
	f.example("outbox migrate --db postgres://app:secret@127.0.0.1:5432/app")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if err := noArgs(f, pos); err != nil {
		return err
	}
	d, err := db.open(ctx, false)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Store.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", d.where, err)
	}
	v, err := d.Store.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("read the schema version in %s: %w", d.where, err)
	}
	t := d.Store.Tables()
	fmt.Fprintf(stdout, "migrated %s tables %q, %q to version %d\n", d.Dialect, t.Outbox, t.Inbox, v)
	return nil
}

package main

import (
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"net/url"
	"strings"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/sqlstore"
	"github.com/outbox-go/outbox/outboxdriver"
)

// migrateOptions are the flags of outbox migrate beside the database's.
type migrateOptions struct {
	db          *dbopen.Options
	dialect     string
	print       bool
	from        int
	check       bool
	printGrants bool
	roles       sqlstore.Roles
}

// runMigrate runs `outbox migrate`: --print, --print-grants, --check, or
// the migration of --db.
func runMigrate(ctx context.Context, args []string, stdout, _ io.Writer) error {
	f, o := newMigrateFlags(stdout)
	pos, err := f.Parse(args)
	if err != nil {
		return err
	}
	if err := cli.NoArgs(f, pos); err != nil {
		return err
	}
	modes := 0
	for _, on := range []bool{o.print, o.check, o.printGrants} {
		if on {
			modes++
		}
	}
	switch {
	case modes > 1:
		return cli.Usagef(f.Hint(), "migrate: --print, --check and --print-grants go one at a time")
	case o.from != 0 && !o.print:
		return cli.Usagef(f.Hint(), "migrate: --from goes with --print")
	case !o.printGrants && (o.roles != sqlstore.Roles{}):
		return cli.Usagef(f.Hint(), "migrate: --writer, --relay, --migrator and --cleanup go with --print-grants")
	case o.print:
		return o.runPrint(f, stdout)
	case o.printGrants:
		return o.runPrintGrants(f, stdout)
	case o.db.DSN == "":
		return cli.Usagef(f.Hint(), "migrate: missing --db (or OUTBOX_DB): %s", "the database to migrate")
	case o.dialect != "":
		return cli.Usagef(f.Hint(), "migrate: --dialect goes with --print or --print-grants; --db names the database")
	case o.check:
		return o.runCheck(ctx, stdout)
	}
	return o.migrate(ctx, stdout)
}

// newMigrateFlags is the flag set of outbox migrate, filling the options it
// returns.
func newMigrateFlags(stdout io.Writer) (*cli.FlagSet, *migrateOptions) {
	f := cli.NewFlagSet("outbox migrate", "--db DSN [flags]",
		"Create or upgrade the outbox and inbox tables to the latest version. Safe to run again,\n"+
			"and from several processes at once. --print writes the migrations' SQL instead, --check\n"+
			"compares the database with it, --print-grants writes least-privilege grants.", stdout)
	o := &migrateOptions{db: dbopen.AddFlags(f)}
	for _, d := range f.Docs() {
		if d.Name == "db" {
			d.Required = false // --print and --print-grants take --dialect instead
		}
	}
	f.StringVar(&o.dialect, "dialect", "", "NAME",
		"postgres, mysql (or mariadb) or sqlite, for --print and --print-grants without --db; --db's scheme otherwise")
	f.BoolVar(&o.print, "print", "write the SQL of every migration, in order, with the version each records, and connect to nothing")
	f.IntVar(&o.from, "from", 0, "N", "with --print, only the migrations after version N (an upgrade from N)")
	f.BoolVar(&o.check, "check", "exit 1 unless the schema is at this build's version and has every column, index and trigger the relay needs; change nothing")
	f.BoolVar(&o.printGrants, "print-grants", "write the grants of the roles below (PostgreSQL, MariaDB/MySQL), to be run by the tables' owner; connect to nothing")
	f.StringVar(&o.roles.Writer, "writer", "", "ROLE", "with --print-grants: the role that only inserts messages (MySQL: NAME or NAME@HOST)")
	f.StringVar(&o.roles.Relay, "relay", "", "ROLE", "with --print-grants: the role that runs the relay")
	f.StringVar(&o.roles.Migrator, "migrator", "", "ROLE", "with --print-grants: the role that owns the schema and runs 'outbox migrate'")
	f.BoolVar(&o.roles.Cleanup, "cleanup", "with --print-grants: let the relay role delete old rows too (--cleanup-older-than, outbox cleanup, outbox dead drop)")
	// The modes and the roles are for one command line: a variable left in
	// a deployment's environment must not turn every migrate into another.
	// Where the database is and how to reach it come from the environment
	// like every other command's.
	for _, d := range f.Docs() {
		if d.Name != "db" && d.Name != "table" && d.Name != "inbox-table" && !strings.HasPrefix(d.Name, "db-tls-") {
			d.NoEnv = true
		}
	}
	f.Example("outbox migrate --db postgres://app@127.0.0.1:5432/app")
	f.Example("outbox migrate --print --dialect postgres --table events.outbox > 0001_outbox.sql")
	f.Example("outbox migrate --check --table events.outbox    # the database from OUTBOX_DB")
	f.Example("outbox migrate --print-grants --dialect postgres --table events.outbox --writer app_writer --relay outbox_relay --cleanup")
	return f, o
}

// migrate creates or upgrades the tables of --db and says to which version.
func (o *migrateOptions) migrate(ctx context.Context, stdout io.Writer) error {
	d, err := o.db.Open(ctx, false)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Store.Migrate(ctx); err != nil {
		if qualifiedTables(d.Store.Tables()) {
			return fmt.Errorf("migrate %s: %w; the schema (on MySQL, the database) of --table and --inbox-table must exist: create it first", d.Where, err)
		}
		return fmt.Errorf("migrate %s: %w", d.Where, err)
	}
	v, err := d.Store.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("read the schema version in %s: %w", d.Where, err)
	}
	t := d.Store.Tables()
	fmt.Fprintf(stdout, "migrated %s tables %q, %q to version %d\n", d.Dialect, t.Outbox, t.Inbox, v)
	return nil
}

// dialectName is the dialect of --dialect or of --db's scheme, which must
// agree when both are given.
func (o *migrateOptions) dialectName(f *cli.FlagSet) (string, error) {
	fromFlag, fromDSN := "", ""
	switch strings.ToLower(o.dialect) {
	case "":
	case "postgres", "postgresql", "pg":
		fromFlag = "postgres"
	case "mysql", "mariadb":
		fromFlag = "mysql"
	case "sqlite", "sqlite3":
		fromFlag = "sqlite"
	default:
		return "", cli.Usagef(f.Hint(), "migrate: --dialect %q: use postgres, mysql (or mariadb) or sqlite", o.dialect)
	}
	if o.db.DSN != "" {
		scheme, _, _ := strings.Cut(o.db.DSN, ":")
		switch strings.ToLower(scheme) {
		case "postgres", "postgresql":
			fromDSN = "postgres"
		case "mysql":
			fromDSN = "mysql"
		case "sqlite":
			fromDSN = "sqlite"
		default:
			return "", dbopen.NotADatabaseURL(o.db.DSN)
		}
	}
	switch {
	case fromFlag == "" && fromDSN == "":
		return "", cli.Usagef(f.Hint(), "migrate: give --dialect (postgres, mysql, sqlite) or --db, whose scheme names it")
	case fromFlag != "" && fromDSN != "" && fromFlag != fromDSN:
		return "", cli.Usagef(f.Hint(), "migrate: --dialect %s does not match --db, a %s URL", o.dialect, fromDSN)
	case fromFlag != "":
		return fromFlag, nil
	}
	return fromDSN, nil
}

// runPrint writes the migrations as SQL, one section per version, each
// followed by the statement that records it.
func (o *migrateOptions) runPrint(f *cli.FlagSet, w io.Writer) error {
	name, err := o.dialectName(f)
	if err != nil {
		return err
	}
	s, err := sqlstore.ScriptFor(name, o.db.Tables())
	if err != nil {
		return fmt.Errorf("%w; check --table / --inbox-table", err)
	}
	if o.from < 0 || o.from > s.Latest() {
		return cli.Usagef(f.Hint(), "migrate: --from %d: versions run from 0 to %d", o.from, s.Latest())
	}
	fmt.Fprintf(w, "-- outbox schema for %s: tables %s and %s, versions %d to %d.\n", name, s.Tables.Outbox, s.Tables.Inbox, o.from+1, s.Latest())
	fmt.Fprintf(w, "-- Written by 'outbox migrate --print'. Run the sections in order, each in one transaction\n")
	fmt.Fprintf(w, "-- where the database allows (MySQL commits each CREATE and ALTER on its own). A section\n")
	fmt.Fprintf(w, "-- ends by recording its version, which the relay and 'outbox migrate --check' read.\n\n")
	fmt.Fprintf(w, "-- the table of recorded versions\n%s;\n", s.MigrationsTable)
	for _, m := range s.Migrations {
		if m.Version <= o.from {
			continue
		}
		fmt.Fprintf(w, "\n-- version %d: %s\n", m.Version, m.Name)
		for _, stmt := range m.Statements {
			fmt.Fprintf(w, "%s;\n", stmt)
		}
		fmt.Fprintf(w, "%s;\n", m.Record)
	}
	return nil
}

// runCheck compares the database with this build's schema.
func (o *migrateOptions) runCheck(ctx context.Context, w io.Writer) error {
	d, err := o.db.Open(ctx, true)
	if err != nil {
		return err
	}
	defer d.Close()
	checker, ok := d.Store.(outboxdriver.SchemaChecker)
	if !ok {
		return fmt.Errorf("migrate --check: the %s driver cannot check its schema", d.Dialect)
	}
	c, err := checker.CheckSchema(ctx)
	if err != nil {
		return fmt.Errorf("check the schema in %s: %w", d.Where, err)
	}
	t := d.Store.Tables()
	if len(c.Problems) == 0 {
		fmt.Fprintf(w, "schema of tables %q, %q in %s is current (version %d)\n", t.Outbox, t.Inbox, d.Where, c.Version)
		return nil
	}
	for _, p := range c.Problems {
		fmt.Fprintf(w, "%s\n", p)
	}
	return fmt.Errorf("schema of tables %q, %q in %s is not current (version %d, this build's %d): %d %s listed above",
		t.Outbox, t.Inbox, d.Where, c.Version, c.Latest, len(c.Problems), plural(int64(len(c.Problems)), "problem", "problems"))
}

// runPrintGrants writes the grants of the roles given.
func (o *migrateOptions) runPrintGrants(f *cli.FlagSet, w io.Writer) error {
	name, err := o.dialectName(f)
	if err != nil {
		return err
	}
	if o.roles.Writer == "" && o.roles.Relay == "" && o.roles.Migrator == "" {
		return cli.Usagef(f.Hint(), "migrate: --print-grants needs --writer, --relay or --migrator")
	}
	if o.roles.Cleanup && o.roles.Relay == "" {
		return cli.Usagef(f.Hint(), "migrate: --cleanup adds to the grants of --relay; give --relay")
	}
	tables := o.db.Tables().WithDefaults()
	if name == "mysql" {
		// MySQL's grants name the database: that of --db where the table
		// names do not.
		if db := mysqlDatabase(o.db.DSN); db != "" {
			for _, p := range []*string{&tables.Outbox, &tables.Inbox} {
				if _, _, q := outboxdriver.SplitTableName(*p); !q {
					*p = db + "." + *p
				}
			}
		}
	}
	secs, err := sqlstore.Grants(name, tables, o.roles)
	if err != nil {
		return fmt.Errorf("%w; check --table, --inbox-table, --db and the roles", err)
	}
	fmt.Fprintf(w, "-- least-privilege grants for the outbox tables %s and %s on %s (docs/privileges.md).\n", tables.Outbox, tables.Inbox, name)
	fmt.Fprintf(w, "-- Create the roles first, with passwords of your own; run these as the tables' owner.\n")
	for _, s := range secs {
		fmt.Fprintf(w, "\n-- %s: %s\n", s.Role, s.Comment)
		for _, stmt := range s.Statements {
			fmt.Fprintf(w, "%s;\n", stmt)
		}
	}
	return nil
}

// qualifiedTables reports whether either table is named schema.table.
func qualifiedTables(t outbox.Tables) bool {
	_, _, a := outboxdriver.SplitTableName(t.Outbox)
	_, _, b := outboxdriver.SplitTableName(t.Inbox)
	return a || b
}

// mysqlDatabase is the database a mysql:// DSN names, or "".
func mysqlDatabase(dsn string) string {
	if !strings.HasPrefix(strings.ToLower(dsn), "mysql:") {
		return ""
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

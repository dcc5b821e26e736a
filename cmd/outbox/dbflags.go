package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"io/fs"
	"os"
	"strings"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// dbOptions are the flags of every command that works on the database.
type dbOptions struct {
	dsn        string
	table      string
	inboxTable string
	tls        dbTLS
}

func addDBFlags(f *cli.FlagSet) *dbOptions {
	o := &dbOptions{}
	f.StringVar(&o.dsn, "db", "", "DSN",
		"the database: postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or sqlite:path/to/file.db").Required = true
	f.StringVar(&o.table, "table", outbox.DefaultOutboxTable, "NAME", "the outbox table")
	f.StringVar(&o.inboxTable, "inbox-table", outbox.DefaultInboxTable, "NAME", "the consumers' deduplication table")
	f.StringVar(&o.tls.ca, "db-tls-ca", "", "PATH",
		"verify the database server's certificate against the CA certificates in PATH (PEM) instead of the system's; "+
			"any --db-tls-* flag makes TLS required (PostgreSQL: sslrootcert, and sslmode=verify-full unless --db sets an sslmode; "+
			"MySQL: the tls_ca parameter)")
	f.StringVar(&o.tls.cert, "db-tls-cert", "", "PATH", "the client certificate (PEM) shown to the database server, with --db-tls-key (PostgreSQL: sslcert; MySQL: tls_cert)")
	f.StringVar(&o.tls.key, "db-tls-key", "", "PATH", "the private key (PEM) of --db-tls-cert (PostgreSQL: sslkey; MySQL: tls_key)")
	f.StringVar(&o.tls.serverName, "db-tls-server-name", "", "NAME",
		"the name the database server's certificate must carry, when it is not the --db host's (MySQL: tls_server_name)")
	return o
}

func (o *dbOptions) tables() outbox.Tables {
	return outbox.Tables{Outbox: o.table, Inbox: o.inboxTable}
}

// open opens the database. With needSchema it also checks that the tables
// exist, so that a command run before "outbox migrate" says so in plain words,
// and it refuses to create a SQLite file that is not there (a typo in the path
// would otherwise leave an empty database behind).
func (o *dbOptions) open(ctx context.Context, needSchema bool) (*database, error) {
	if err := o.tables().WithDefaults().Validate(); err != nil {
		return nil, fmt.Errorf("%w; check --table / --inbox-table", err)
	}
	if needSchema {
		if isSQLite(o.dsn) {
			if path, err := sqlitePath(o.dsn); err == nil {
				if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
					return nil, fmt.Errorf("sqlite file %q does not exist; check --db, or create it with 'outbox migrate --db %s'", path, o.dsn)
				}
			}
		}
	}
	db, err := openDatabase(ctx, o.dsn, o.tls, o.tables())
	if err != nil {
		return nil, err
	}
	if !needSchema {
		return db, nil
	}
	v, err := db.Store.SchemaVersion(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("read the schema version in %s: %w", db.where, err)
	}
	if v == 0 {
		db.Close()
		t := db.Store.Tables()
		return nil, fmt.Errorf("the outbox tables (%q, %q) do not exist in %s; run 'outbox migrate' with the same --db and --table first",
			t.Outbox, t.Inbox, db.where)
	}
	return db, nil
}

func isSQLite(dsn string) bool {
	scheme, _, ok := strings.Cut(dsn, ":")
	return ok && strings.EqualFold(scheme, "sqlite")
}

// latestVersion is the newest migration the binary knows, when the store says.
func latestVersion(s outboxdriver.Store) (int, bool) {
	lv, ok := s.(outboxdriver.SchemaChecker)
	if !ok {
		return 0, false
	}
	return lv.LatestVersion(), true
}

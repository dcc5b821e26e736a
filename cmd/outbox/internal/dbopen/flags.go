package dbopen

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

// Options are the flags of every command that works on the database.
type Options struct {
	DSN        string
	Table      string
	InboxTable string
	TLS        TLS
}

// AddFlags defines --db, --table, --inbox-table and the --db-tls-* flags on f
// and returns the options they set.
func AddFlags(f *cli.FlagSet) *Options {
	o := &Options{}
	f.StringVar(&o.DSN, "db", "", "DSN",
		"the database: postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or sqlite:path/to/file.db").Required = true
	f.StringVar(&o.Table, "table", outbox.DefaultOutboxTable, "NAME", "the outbox table")
	f.StringVar(&o.InboxTable, "inbox-table", outbox.DefaultInboxTable, "NAME", "the consumers' deduplication table")
	f.StringVar(&o.TLS.CA, "db-tls-ca", "", "PATH",
		"verify the database server's certificate against the CA certificates in PATH (PEM) instead of the system's; "+
			"any --db-tls-* flag makes TLS required (PostgreSQL: sslrootcert, and sslmode=verify-full unless --db sets an sslmode; "+
			"MySQL: the tls_ca parameter)")
	f.StringVar(&o.TLS.Cert, "db-tls-cert", "", "PATH", "the client certificate (PEM) shown to the database server, with --db-tls-key (PostgreSQL: sslcert; MySQL: tls_cert)")
	f.StringVar(&o.TLS.Key, "db-tls-key", "", "PATH", "the private key (PEM) of --db-tls-cert (PostgreSQL: sslkey; MySQL: tls_key)")
	f.StringVar(&o.TLS.ServerName, "db-tls-server-name", "", "NAME",
		"the name the database server's certificate must carry, when it is not the --db host's (MySQL: tls_server_name)")
	return o
}

// Tables returns the tables of --table and --inbox-table.
func (o *Options) Tables() outbox.Tables {
	return outbox.Tables{Outbox: o.Table, Inbox: o.InboxTable}
}

// open opens the database. With needSchema it also checks that the tables
// exist, so that a command run before "outbox migrate" says so in plain words,
// and it refuses to create a SQLite file that is not there (a typo in the path
// would otherwise leave an empty database behind).
func (o *Options) Open(ctx context.Context, needSchema bool) (*Database, error) {
	if err := o.Tables().WithDefaults().Validate(); err != nil {
		return nil, fmt.Errorf("%w; check --table / --inbox-table", err)
	}
	if needSchema {
		if isSQLite(o.DSN) {
			if path, err := sqlitePath(o.DSN); err == nil {
				if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
					return nil, fmt.Errorf("sqlite file %q does not exist; check --db, or create it with 'outbox migrate --db %s'", path, o.DSN)
				}
			}
		}
	}
	db, err := Open(ctx, o.DSN, o.TLS, o.Tables())
	if err != nil {
		return nil, err
	}
	if !needSchema {
		return db, nil
	}
	v, err := db.Store.SchemaVersion(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("read the schema version in %s: %w", db.Where, err)
	}
	if v == 0 {
		db.Close()
		t := db.Store.Tables()
		return nil, fmt.Errorf("the outbox tables (%q, %q) do not exist in %s; run 'outbox migrate' with the same --db and --table first",
			t.Outbox, t.Inbox, db.Where)
	}
	return db, nil
}

func isSQLite(dsn string) bool {
	scheme, _, ok := strings.Cut(dsn, ":")
	return ok && strings.EqualFold(scheme, "sqlite")
}

// LatestVersion is the newest migration the binary knows, when the store says.
func LatestVersion(s outboxdriver.Store) (int, bool) {
	lv, ok := s.(outboxdriver.SchemaChecker)
	if !ok {
		return 0, false
	}
	return lv.LatestVersion(), true
}

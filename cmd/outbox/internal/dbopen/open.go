// Package dbopen opens the outbox database of a --db URL (PostgreSQL, MySQL,
// SQLite) for the commands of cmd/outbox, with the --db-tls-* flags and a
// connection timeout, and never shows the password in an error.
package dbopen

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
	"github.com/outbox-go/outbox/internal/sqlstore"
	"github.com/outbox-go/outbox/outboxdriver"
)

// ConnectTimeout bounds the first connection, so that a host that drops
// packets fails the command instead of hanging it.
const ConnectTimeout = 10 * time.Second

// Database is an opened outbox database.
type Database struct {
	Store   outboxdriver.Store  // the driver, as a Store (relay, admin)
	Dialect string              // "postgres", "mysql", "sqlite"
	PG      *outboxpgx.Driver   // set for postgres (pgxpool based)
	SQL     *sqlstore.SQLDriver // set for mysql and sqlite (database/sql based)
	Close   func()

	// Where names the database for messages, without its password:
	// "postgres at 127.0.0.1:5432/test", "sqlite file data/outbox.db".
	Where string
}

// sqlDriver is the database/sql driver under drv, for the bench.
func sqlDriver(drv outboxdriver.Store) *sqlstore.SQLDriver {
	d, _ := sqlstore.SQLOf(drv)
	return d
}

// Open opens the database named by dsn (postgres://, postgresql://,
// mysql://, sqlite:), checks that it answers, and returns a driver for tables.
// Error messages never contain the password.
//
// t asks for TLS with the files and server name of the --db-tls-* flags; see
// postgresTLS and mysqlConfig. SQLite takes none.
func Open(ctx context.Context, dsn string, t TLS, tables outbox.Tables) (*Database, error) {
	tables = tables.WithDefaults()
	if err := tables.Validate(); err != nil {
		return nil, fmt.Errorf("%w; check --table / --inbox-table", err)
	}
	scheme, _, ok := strings.Cut(dsn, ":")
	if !ok || !validScheme(scheme) || isDriverDSN(dsn) {
		return nil, NotADatabaseURL(dsn)
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return openPostgres(ctx, dsn, t, tables)
	case "mysql":
		return openMySQL(ctx, dsn, t, tables)
	case "sqlite":
		if t.Set() {
			return nil, errors.New("--db-tls-* apply to PostgreSQL and MySQL; a sqlite: --db takes none")
		}
		return openSQLite(ctx, dsn, tables)
	}
	return nil, fmt.Errorf("unknown database scheme %q in --db; use postgres://, mysql:// or sqlite:", scheme) //nolint:staticcheck // ends with the scheme "sqlite:", not punctuation
}

// NotADatabaseURL is the error for a --db without a scheme. It quotes dsn
// only when dsn cannot hold a password.
func NotADatabaseURL(dsn string) error {
	const forms = "use postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or sqlite:path/to/file.db"
	switch {
	case isDriverDSN(dsn):
		return fmt.Errorf("--db is a go-sql-driver DSN (user:pass@tcp(host:3306)/db), not a database URL; use mysql://user:pass@host:3306/db (not shown: it may hold a password)")
	case strings.ContainsAny(dsn, ":@"):
		return fmt.Errorf("--db is not a database URL (not shown: it may hold a password); %s", forms)
	}
	return fmt.Errorf("--db %q is not a database URL; %s", dsn, forms)
}

// isDriverDSN reports whether dsn has the go-sql-driver form
// user:pass@tcp(host:3306)/db rather than a URL's.
func isDriverDSN(dsn string) bool {
	if strings.Contains(dsn, "://") {
		return false
	}
	for _, n := range []string{"@tcp(", "@tcp4(", "@tcp6(", "@unix("} {
		if strings.Contains(dsn, n) {
			return true
		}
	}
	return false
}

// validScheme reports whether s is a URL scheme: a letter, then letters,
// digits, '+', '-' or '.'.
func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

func openPostgres(ctx context.Context, dsn string, t TLS, tables outbox.Tables) (*Database, error) {
	cli.AddURLSecret(dsn)
	if err := checkUserInfo(dsn); err != nil {
		return nil, err
	}
	dsn, err := postgresTLS(dsn, t)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("invalid postgres --db: %v; the form is postgres://user:pass@host:5432/db", err)
	}
	cli.AddSecret(cfg.ConnConfig.Password)
	if err := checkPostgresTLS(&cfg.ConnConfig.Config, t, t.Set() || postgresAsksTLS(dsn)); err != nil {
		return nil, err
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = ConnectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "outbox"
	}
	where := "postgres at " + net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))) + "/" + cfg.ConnConfig.Database
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, connectError(where, err)
	}
	if err := ping(ctx, pool.Ping); err != nil {
		pool.Close()
		return nil, connectError(where, err)
	}
	drv, err := outboxpgx.New(pool, tables)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Database{Store: drv, Dialect: "postgres", PG: drv, Close: pool.Close, Where: where}, nil
}

// mysqlConfig translates mysql://user:pass@host:3306/db?param=value into the
// go-sql-driver configuration the store needs: parseTime=true and loc=UTC
// always (the store reads UTC DATETIMEs), interpolateParams=true unless the
// DSN says otherwise, and the DSN's other parameters as given.
//
// The TLS parameters tls_ca, tls_cert, tls_key and tls_server_name, and the
// flags of t, set the driver's TLS configuration; TLS is then required, never
// dropped for plain text.
func mysqlConfig(dsn string, t TLS) (*mysql.Config, error) {
	if err := checkUserInfo(dsn); err != nil {
		return nil, err
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("invalid mysql --db %s: %s; the form is mysql://user:pass@host:3306/db", cli.RedactDSN(dsn), cli.Scrub(cli.UnwrapAll(err).Error()))
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, fmt.Errorf("mysql --db %s names no database; the form is mysql://user:pass@host:3306/db", cli.RedactDSN(dsn))
	}
	q := u.Query()
	t, err = mysqlTLS(q, t)
	if err != nil {
		return nil, err
	}
	if mode := q.Get("tls"); t.Set() && q.Has("tls") && mode != "true" {
		return nil, fmt.Errorf("mysql --db %s sets tls=%s and the TLS files or server name ask for a verified TLS connection; drop tls=%s", cli.RedactDSN(dsn), mode, mode)
	}
	// Let the driver parse and check the parameters it knows; user, address
	// and database are set below, so their characters need no escaping.
	cfg, err := mysql.ParseDSN("/?" + q.Encode())
	if err != nil {
		return nil, fmt.Errorf("invalid mysql --db %s: %s", cli.RedactDSN(dsn), cli.Scrub(err.Error()))
	}
	host := u.Hostname()
	if host == "" {
		host = "127.0.0.1"
	}
	port := u.Port()
	if port == "" {
		port = "3306"
	}
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", net.JoinHostPort(host, port), db
	if t.Set() {
		if cfg.TLS, err = t.Config("--db-tls"); err != nil {
			return nil, err
		}
		cfg.AllowFallbackToPlaintext = false
	}
	if cfg.TLS != nil && t.ServerName == "" && !cfg.TLS.InsecureSkipVerify {
		// The driver named the server after its default address while
		// parsing the parameters alone: verify the real host's name.
		cfg.TLS.ServerName = host
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.ParseTime, cfg.Loc = true, time.UTC
	if !q.Has("interpolateParams") {
		cfg.InterpolateParams = true
	}
	if !q.Has("timeout") {
		cfg.Timeout = ConnectTimeout
	}
	return cfg, nil
}

func openMySQL(ctx context.Context, dsn string, t TLS, tables outbox.Tables) (*Database, error) {
	cli.AddURLSecret(dsn)
	cfg, err := mysqlConfig(dsn, t)
	if err != nil {
		return nil, err
	}
	where := "mysql at " + cfg.Addr + "/" + cfg.DBName
	_ = mysql.SetLogger(mysqlLogger{})
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("invalid mysql --db: %v", err)
	}
	db := sql.OpenDB(conn)
	db.SetConnMaxLifetime(5 * time.Minute)
	if err := ping(ctx, db.PingContext); err != nil {
		db.Close()
		return nil, connectError(where, err)
	}
	drv, err := outboxmysql.New(db, tables)
	if err != nil {
		db.Close()
		return nil, err
	}
	// The relay watches the binary log for commits where the server writes
	// one in ROW format and the user may read it; elsewhere it says why
	// once in its log and polls.
	bd, err := drv.WithBinlog(outboxmysql.BinlogConfig{Conn: cfg})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Database{Store: bd, Dialect: "mysql", SQL: sqlDriver(drv), Close: func() { bd.Close(); db.Close() }, Where: where}, nil
}

// mysqlLogger sends the MySQL driver's own messages (a connection dropped by
// the server, say) to the process's slog logger, which the relay configures.
type mysqlLogger struct{}

func (mysqlLogger) Print(v ...any) { slog.Warn("mysql driver: " + cli.OneLine(fmt.Sprint(v...))) }

// sqlitePath returns the file of sqlite:path, sqlite://path or sqlite:///abs/path.
func sqlitePath(dsn string) (string, error) {
	_, path, _ := strings.Cut(dsn, ":")
	path = strings.TrimPrefix(path, "//")
	switch {
	case path == "":
		return "", errors.New("sqlite --db names no file; the form is sqlite:path/to/file.db")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return "", fmt.Errorf("sqlite --db %q: give a file path, e.g. sqlite:path/to/file.db (an in-memory database would vanish when the command ends)", cli.RedactDSN(dsn))
	case strings.Contains(path, "?"):
		return "", fmt.Errorf("sqlite --db %q: options are not supported; the outbox sets its own (WAL, busy timeout)", cli.RedactDSN(dsn))
	}
	return path, nil
}

func openSQLite(ctx context.Context, dsn string, tables outbox.Tables) (*Database, error) {
	path, err := sqlitePath(dsn)
	if err != nil {
		return nil, err
	}
	where := fmt.Sprintf("sqlite file %q", path)
	db, err := outboxsqlite.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s: %v; check --db / OUTBOX_DB", where, err)
	}
	if err := ping(ctx, db.PingContext); err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot open %s: %s; check --db / OUTBOX_DB (does the directory exist and is it writable?)", where, cli.OneLine(err.Error()))
	}
	drv, err := outboxsqlite.New(db, tables)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Database{Store: drv, Dialect: "sqlite", SQL: sqlDriver(drv), Close: func() { db.Close() }, Where: where}, nil
}

// connectError is the error of a first connection to where that failed.
func connectError(where string, err error) error {
	msg := cli.OneLine(err.Error())
	return fmt.Errorf("cannot connect to %s: %s%s; check --db / OUTBOX_DB", where, msg, tlsHint(msg))
}

func ping(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	err := f(ctx)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s", ConnectTimeout)
	}
	return err
}

// checkUserInfo refuses a URL whose user name or password holds an "@",
// "/", "?" or "#" not percent-encoded: parsers disagree on where such a
// password ends (pgx took the first "@", Go's URL parser ends the host at
// the first "/", "?" or "#"), and their errors then quote the rest as a
// host, a port or a path. Neither the URL nor the parser's error is shown.
func checkUserInfo(dsn string) error {
	_, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return nil // key=value form: pgx's own rules, no URL authority
	}
	authority := rest
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		authority = rest[:end]
	}
	switch {
	case strings.Count(authority, "@") > 1:
		return errors.New("--db: the user name or password holds an \"@\"; write it as %40 (p%40ss for p@ss)")
	case strings.Contains(rest[len(authority):], "@"):
		return errors.New("--db: the password holds a \"/\", \"?\" or \"#\" that is not percent-encoded, or the URL holds an \"@\" after the host; " +
			"write them as %2F, %3F, %23 and %40 (p%2Fss for p/ss); the URL is not shown, as it may hold a password")
	}
	return nil
}

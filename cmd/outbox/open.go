package main

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
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/internal/sqlstore"
	"github.com/outbox-go/outbox/outboxdriver"
	"github.com/outbox-go/outbox/webhook"
)

// connectTimeout bounds the first connection, so that a host that drops
// packets fails the command instead of hanging it.
const connectTimeout = 10 * time.Second

// database is an opened outbox database.
type database struct {
	Store   outboxdriver.Store  // the driver, as a Store (relay, admin)
	Dialect string              // "postgres", "mysql", "sqlite"
	PG      *outboxpgx.Driver   // set for postgres (pgxpool based)
	SQL     *sqlstore.SQLDriver // set for mysql and sqlite (database/sql based)
	Close   func()

	// where names the database for messages, without its password:
	// "postgres at 127.0.0.1:5432/test", "sqlite file data/outbox.db".
	where string
}

// sqlDriver is the database/sql driver under drv, for the bench.
func sqlDriver(drv outboxdriver.Store) *sqlstore.SQLDriver {
	d, _ := sqlstore.SQLOf(drv)
	return d
}

// openDatabase opens the database named by dsn (postgres://, postgresql://,
// mysql://, sqlite:), checks that it answers, and returns a driver for tables.
// Error messages never contain the password.
//
// t asks for TLS with the files and server name of the --db-tls-* flags; see
// postgresTLS and mysqlConfig. SQLite takes none.
func openDatabase(ctx context.Context, dsn string, t dbTLS, tables outbox.Tables) (*database, error) {
	tables = tables.WithDefaults()
	if err := tables.Validate(); err != nil {
		return nil, fmt.Errorf("%w; check --table / --inbox-table", err)
	}
	scheme, _, ok := strings.Cut(dsn, ":")
	if !ok || !validScheme(scheme) || isDriverDSN(dsn) {
		return nil, notADatabaseURL(dsn)
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return openPostgres(ctx, dsn, t, tables)
	case "mysql":
		return openMySQL(ctx, dsn, t, tables)
	case "sqlite":
		if t.set() {
			return nil, errors.New("--db-tls-* apply to PostgreSQL and MySQL; a sqlite: --db takes none")
		}
		return openSQLite(ctx, dsn, tables)
	}
	return nil, fmt.Errorf("unknown database scheme %q in --db; use postgres://, mysql:// or sqlite:", scheme) //nolint:staticcheck // ends with the scheme "sqlite:", not punctuation
}

// notADatabaseURL is the error for a --db without a scheme. It quotes dsn
// only when dsn cannot hold a password.
func notADatabaseURL(dsn string) error {
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

func openPostgres(ctx context.Context, dsn string, t dbTLS, tables outbox.Tables) (*database, error) {
	addURLSecret(dsn)
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
	addSecret(cfg.ConnConfig.Password)
	if err := checkPostgresTLS(&cfg.ConnConfig.Config, t, t.set() || postgresAsksTLS(dsn)); err != nil {
		return nil, err
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
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
	return &database{Store: drv, Dialect: "postgres", PG: drv, Close: pool.Close, where: where}, nil
}

// mysqlConfig translates mysql://user:pass@host:3306/db?param=value into the
// go-sql-driver configuration the store needs: parseTime=true and loc=UTC
// always (the store reads UTC DATETIMEs), interpolateParams=true unless the
// DSN says otherwise, and the DSN's other parameters as given.
//
// The TLS parameters tls_ca, tls_cert, tls_key and tls_server_name, and the
// flags of t, set the driver's TLS configuration; TLS is then required, never
// dropped for plain text.
func mysqlConfig(dsn string, t dbTLS) (*mysql.Config, error) {
	if err := checkUserInfo(dsn); err != nil {
		return nil, err
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("invalid mysql --db %s: %s; the form is mysql://user:pass@host:3306/db", redactDSN(dsn), scrub(unwrapAll(err).Error()))
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, fmt.Errorf("mysql --db %s names no database; the form is mysql://user:pass@host:3306/db", redactDSN(dsn))
	}
	q := u.Query()
	t, err = mysqlTLS(q, t)
	if err != nil {
		return nil, err
	}
	if mode := q.Get("tls"); t.set() && q.Has("tls") && mode != "true" {
		return nil, fmt.Errorf("mysql --db %s sets tls=%s and the TLS files or server name ask for a verified TLS connection; drop tls=%s", redactDSN(dsn), mode, mode)
	}
	// Let the driver parse and check the parameters it knows; user, address
	// and database are set below, so their characters need no escaping.
	cfg, err := mysql.ParseDSN("/?" + q.Encode())
	if err != nil {
		return nil, fmt.Errorf("invalid mysql --db %s: %s", redactDSN(dsn), scrub(err.Error()))
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
	if t.set() {
		if cfg.TLS, err = t.tlsConfig("--db-tls"); err != nil {
			return nil, err
		}
		cfg.AllowFallbackToPlaintext = false
	}
	if cfg.TLS != nil && t.serverName == "" && !cfg.TLS.InsecureSkipVerify {
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
		cfg.Timeout = connectTimeout
	}
	return cfg, nil
}

func openMySQL(ctx context.Context, dsn string, t dbTLS, tables outbox.Tables) (*database, error) {
	addURLSecret(dsn)
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
	return &database{Store: bd, Dialect: "mysql", SQL: sqlDriver(drv), Close: func() { bd.Close(); db.Close() }, where: where}, nil
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
		return "", fmt.Errorf("sqlite --db %q: give a file path, e.g. sqlite:path/to/file.db (an in-memory database would vanish when the command ends)", redactDSN(dsn))
	case strings.Contains(path, "?"):
		return "", fmt.Errorf("sqlite --db %q: options are not supported; the outbox sets its own (WAL, busy timeout)", redactDSN(dsn))
	}
	return path, nil
}

func openSQLite(ctx context.Context, dsn string, tables outbox.Tables) (*database, error) {
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
	return &database{Store: drv, Dialect: "sqlite", SQL: sqlDriver(drv), Close: func() { db.Close() }, where: where}, nil
}

// connectError is the error of a first connection to where that failed.
func connectError(where string, err error) error {
	msg := cli.OneLine(err.Error())
	return fmt.Errorf("cannot connect to %s: %s%s; check --db / OUTBOX_DB", where, msg, tlsHint(msg))
}

func ping(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	err := f(ctx)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s", connectTimeout)
	}
	return err
}

// publisherOptions configures the publisher openPublisher builds. Zero fields
// take the publisher's defaults.
type publisherOptions struct {
	// Source is the CloudEvents source attribute. Empty: the broker URL's
	// source parameter, where the broker takes one, else "/outbox".
	Source string
	// WebhookSecrets, when set, sign each webhook request (Standard
	// Webhooks), one signature per secret.
	WebhookSecrets []string
	// LegacySignature also sends the signature of earlier releases in
	// X-Outbox-Signature-256.
	LegacySignature bool
	// WebhookTimeout bounds one webhook request. Defaults to 10s.
	WebhookTimeout time.Duration
	// Concurrency is the most requests in flight at once. Defaults to 16.
	Concurrency int
}

const supportedBrokers = "nats://, amqp(s)://, kafka://, redis(s)://, mqtt(s)://, http(s)://, discard:"

// openPublisher returns the publisher for brokerURL and a function that
// releases it.
func openPublisher(ctx context.Context, brokerURL string, o publisherOptions) (pub outbox.Publisher, closeFn func(), err error) {
	scheme, _, ok := strings.Cut(brokerURL, ":")
	if !ok || scheme == "" {
		return nil, nil, fmt.Errorf("--broker %q is not a broker URL; supported: %s", redactDSN(brokerURL), supportedBrokers)
	}
	scheme = strings.ToLower(scheme)
	switch scheme {
	case "discard":
		return outbox.Discard, func() {}, nil
	case "http", "https":
		addURLSecret(brokerURL)
		for _, secret := range o.WebhookSecrets {
			addSecret(secret)
		}
		var first string
		var more []string
		if len(o.WebhookSecrets) > 0 {
			first, more = o.WebhookSecrets[0], o.WebhookSecrets[1:]
		}
		wp, err := webhook.New(webhook.Config{
			URL:             brokerURL,
			Source:          o.Source,
			Secret:          first,
			Secrets:         more,
			LegacySignature: o.LegacySignature,
			Timeout:         o.WebhookTimeout,
			Concurrency:     o.Concurrency,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("%v; check --broker, --source, --webhook-secret, --webhook-secret-file, --webhook-timeout and --concurrency", err)
		}
		return wp, func() { _ = wp.Close() }, nil
	}
	b, ok := brokers[scheme]
	if !ok {
		return nil, nil, fmt.Errorf("unknown broker scheme %q in --broker; supported: %s", scheme, supportedBrokers)
	}
	addURLSecret(brokerURL)
	p, err := b.open(ctx, brokerURL, o.Source)
	if err != nil {
		msg := fmt.Sprintf("%s; check --broker / OUTBOX_BROKER", scrub(cli.OneLine(err.Error())))
		if outbox.IsUnavailable(err) {
			return nil, nil, unreachableError(msg)
		}
		return nil, nil, errors.New(msg)
	}
	return p, func() { _ = p.Close() }, nil
}

// unreachableError is a broker that could not be reached, with its message
// already scrubbed: it satisfies outbox.IsUnavailable.
type unreachableError string

func (e unreachableError) Error() string        { return string(e) }
func (e unreachableError) Is(target error) bool { return target == outbox.ErrUnavailable }

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

// redactDSN returns dsn, a URL or a go-sql-driver DSN, with its password
// and tokens masked (package redact).
func redactDSN(dsn string) string { return redact.URL(dsn) }

// secrets are the passwords and keys this process was given; every message
// printed passes through redact, in case a library quoted one.
var secrets struct {
	sync.Mutex
	list []string
}

func addSecret(s string) {
	if len(s) < 3 { // a one- or two-letter password would redact every word
		return
	}
	secrets.Lock()
	defer secrets.Unlock()
	secrets.list = append(secrets.list, s)
	if esc := url.QueryEscape(s); esc != s {
		secrets.list = append(secrets.list, esc)
	}
	if esc := url.PathEscape(s); esc != s {
		secrets.list = append(secrets.list, esc)
	}
}

// addURLSecret adds the passwords, tokens and secret parameter values of
// raw, a URL, a list of them or a go-sql-driver DSN, even one that does not
// parse.
func addURLSecret(raw string) {
	for _, s := range redact.Secrets(raw) {
		addSecret(s)
	}
}

// scrub replaces every known secret in msg with "xxxxx", and masks the
// credentials of every URL and DSN it quotes (package redact).
func scrub(msg string) string {
	secrets.Lock()
	for _, s := range secrets.list {
		msg = strings.ReplaceAll(msg, s, redact.Mask)
	}
	secrets.Unlock()
	return redact.Text(msg)
}

// unwrapAll returns the innermost error of a chain, whose text does not repeat
// the (possibly secret) input the outer layers quote.
func unwrapAll(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

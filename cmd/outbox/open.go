package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	"github.com/outbox-go/outbox/internal/sqlstore"
	"github.com/outbox-go/outbox/webhook"
)

// connectTimeout bounds the first connection, so that a host that drops
// packets fails the command instead of hanging it.
const connectTimeout = 10 * time.Second

// database is an opened outbox database.
type database struct {
	Store   outbox.Store        // the driver, as a Store (relay, admin)
	Dialect string              // "postgres", "mysql", "sqlite"
	PG      *outboxpgx.Driver   // set for postgres (pgxpool based)
	SQL     *sqlstore.SQLDriver // set for mysql and sqlite (database/sql based)
	Close   func()

	// where names the database for messages, without its password:
	// "postgres at 127.0.0.1:5432/test", "sqlite file data/outbox.db".
	where string
}

// openDatabase opens the database named by dsn (postgres://, postgresql://,
// mysql://, sqlite:), checks that it answers, and returns a driver for tables.
// Error messages never contain the password.
func openDatabase(ctx context.Context, dsn string, tables outbox.Tables) (*database, error) {
	tables = tables.WithDefaults()
	if err := tables.Validate(); err != nil {
		return nil, fmt.Errorf("%w; check --table / --inbox-table", err)
	}
	scheme, _, ok := strings.Cut(dsn, ":")
	if !ok || scheme == "" {
		return nil, fmt.Errorf("--db %q is not a database URL; use postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db or sqlite:path/to/file.db", redactDSN(dsn))
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return openPostgres(ctx, dsn, tables)
	case "mysql":
		return openMySQL(ctx, dsn, tables)
	case "sqlite":
		return openSQLite(ctx, dsn, tables)
	}
	return nil, fmt.Errorf("unknown database scheme %q in --db; use postgres://, mysql:// or sqlite:", scheme) //nolint:staticcheck // ends with the scheme "sqlite:", not punctuation
}

func openPostgres(ctx context.Context, dsn string, tables outbox.Tables) (*database, error) {
	addURLSecret(dsn)
	if err := checkUserInfoAt(dsn); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("invalid postgres --db: %v; the form is postgres://user:pass@host:5432/db", err)
	}
	addSecret(cfg.ConnConfig.Password)
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "outbox"
	}
	where := "postgres at " + net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))) + "/" + cfg.ConnConfig.Database
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to %s: %s; check --db / OUTBOX_DB", where, oneLine(err.Error()))
	}
	if err := ping(ctx, pool.Ping); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot connect to %s: %s; check --db / OUTBOX_DB", where, oneLine(err.Error()))
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
func mysqlConfig(dsn string) (*mysql.Config, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("invalid mysql --db %s: %v; the form is mysql://user:pass@host:3306/db", redactDSN(dsn), unwrapAll(err))
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, fmt.Errorf("mysql --db %s names no database; the form is mysql://user:pass@host:3306/db", u.Redacted())
	}
	q := u.Query()
	// Let the driver parse and check the parameters it knows; user, address
	// and database are set below, so their characters need no escaping.
	cfg, err := mysql.ParseDSN("/?" + q.Encode())
	if err != nil {
		return nil, fmt.Errorf("invalid mysql --db %s: %v", u.Redacted(), err)
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

func openMySQL(ctx context.Context, dsn string, tables outbox.Tables) (*database, error) {
	addURLSecret(dsn)
	cfg, err := mysqlConfig(dsn)
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
		return nil, fmt.Errorf("cannot connect to %s: %s; check --db / OUTBOX_DB", where, oneLine(err.Error()))
	}
	drv, err := outboxmysql.New(db, tables)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &database{Store: drv, Dialect: "mysql", SQL: drv.SQLDriver, Close: func() { db.Close() }, where: where}, nil
}

// mysqlLogger sends the MySQL driver's own messages (a connection dropped by
// the server, say) to the process's slog logger, which the relay configures.
type mysqlLogger struct{}

func (mysqlLogger) Print(v ...any) { slog.Warn("mysql driver: " + oneLine(fmt.Sprint(v...))) }

// sqlitePath returns the file of sqlite:path, sqlite://path or sqlite:///abs/path.
func sqlitePath(dsn string) (string, error) {
	_, path, _ := strings.Cut(dsn, ":")
	path = strings.TrimPrefix(path, "//")
	switch {
	case path == "":
		return "", errors.New("sqlite --db names no file; the form is sqlite:path/to/file.db")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return "", fmt.Errorf("sqlite --db %q: give a file path, e.g. sqlite:path/to/file.db (an in-memory database would vanish when the command ends)", dsn)
	case strings.Contains(path, "?"):
		return "", fmt.Errorf("sqlite --db %q: options are not supported; the outbox sets its own (WAL, busy timeout)", dsn)
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
		return nil, fmt.Errorf("cannot open %s: %s; check --db / OUTBOX_DB (does the directory exist and is it writable?)", where, oneLine(err.Error()))
	}
	drv, err := outboxsqlite.New(db, tables)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &database{Store: drv, Dialect: "sqlite", SQL: drv.SQLDriver, Close: func() { db.Close() }, where: where}, nil
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
	// WebhookSecret, when set, signs each webhook body with HMAC-SHA256.
	WebhookSecret string
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
		addSecret(o.WebhookSecret)
		wp, err := webhook.New(webhook.Config{
			URL:         brokerURL,
			Source:      o.Source,
			Secret:      o.WebhookSecret,
			Timeout:     o.WebhookTimeout,
			Concurrency: o.Concurrency,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("%v; check --broker, --source, --webhook-timeout and --concurrency", err)
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
		return nil, nil, fmt.Errorf("%s; check --broker / OUTBOX_BROKER", redact(oneLine(err.Error())))
	}
	return p, func() { _ = p.Close() }, nil
}

// checkUserInfoAt refuses a URL whose user name or password holds an "@"
// not written as %40: parsers disagree on which "@" ends them (pgx took
// the first, so part of the password became the host, and its error
// printed that part).
func checkUserInfoAt(dsn string) error {
	_, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return nil // key=value form: pgx's own rules, no URL authority
	}
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	if strings.Count(rest, "@") > 1 {
		return errors.New("--db: the user name or password holds an \"@\"; write it as %40 (postgres://user:p%40ss@host:5432/db)")
	}
	return nil
}

// redactDSN returns dsn with its password replaced by "xxxxx", or a
// placeholder when dsn is not a URL that can be redacted with confidence.
func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		if strings.Contains(dsn, "@") {
			return "(unparsable URL, not shown)"
		}
		return dsn
	}
	return u.Redacted()
}

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

func addURLSecret(raw string) {
	u, err := url.Parse(raw)
	if err == nil {
		if u.User != nil {
			if p, ok := u.User.Password(); ok {
				addSecret(p)
			}
		}
		return
	}
	// Not a URL (a bad port, say), but it may still hold a password.
	_, rest, ok := strings.Cut(raw, "://")
	if at := strings.LastIndex(rest, "@"); ok && at > 0 {
		if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
			addSecret(pw)
		}
	}
}

// redact replaces every known secret in msg with "xxxxx".
func redact(msg string) string {
	secrets.Lock()
	defer secrets.Unlock()
	for _, s := range secrets.list {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return msg
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

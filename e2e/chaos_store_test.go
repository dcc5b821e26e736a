//go:build chaos

package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp/rabbittest"
	"github.com/outbox-go/outbox/driver/outboxmysql"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
	"github.com/outbox-go/outbox/outboxdriver"
)

// relayLease is how long a relay's claim hides its batch on SQLite: twice
// the relays' --publish-timeout. Some freezes of the chaos run outlast it.
const relayLease = 10 * time.Second

// chaosStore is the producers' database as the chaos run uses it.
type chaosStore struct {
	// relayDSN is the relays' --db.
	relayDSN string
	// tx runs one business transaction: debit acct by amount and write m,
	// then commit, or return errRollback after writing when rollback.
	tx txFunc
	// dropRelayConns ends the relays' database sessions; nil where the
	// database has no sessions to end (SQLite).
	dropRelayConns func(ctx context.Context) (int, error)
	// lateTx, where set (PostgreSQL), is tx writing m first, so that it
	// holds an id before anything else, then staying open for 0.1-3 s while
	// rows with higher ids commit and are relayed.
	lateTx txFunc
	// outboxID reads a committed message's outbox id; ok is false when its
	// row is gone (cleanup deleted it).
	outboxID func(ctx context.Context, msgID string) (id int64, ok bool, err error)
	// row reads a message's outbox row, for the report of a lost message.
	row func(ctx context.Context, msgID string) (status, lastError string, err error)
}

// rowSQL reads a row's status and last error, given its msg_id.
const rowSQL = `SELECT CAST(status AS CHAR(8)), COALESCE(last_error, '') FROM outbox WHERE msg_id = `

// chaosAccounts is how many accounts the producers debit: the keys of the
// keyed messages, few enough that each has many messages in a run.
const chaosAccounts = 50

// txFunc runs one business transaction of the chaos run.
type txFunc func(ctx context.Context, m outbox.Message, acct string, amount int, rollback bool) error

// newChaosStore opens the harness's consumer side and the producers'
// database of dialect, with the outbox tables and the accounts.
func newChaosStore(ctx context.Context, t *testing.T, b Broker, dialect string) (*harness, *chaosStore) {
	t.Helper()
	switch dialect {
	case "postgres":
		h := newHarness(ctx, t, b)
		var schema string
		if err := h.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			t.Fatal(err)
		}
		// The relays' sessions are told apart by their application name,
		// and the server ends any transaction of theirs left idle for a
		// second, as managed PostgreSQL services often do: no claim may
		// depend on a transaction held open while the broker publishes.
		app := "outbox-chaos-" + schema
		st := &chaosStore{relayDSN: PostgresDSN() + "&search_path=" + schema + "&application_name=" + app +
			"&idle_in_transaction_session_timeout=1000", tx: h.transferTx}
		if _, err := h.pool.Exec(ctx, `INSERT INTO accounts SELECT 'acct-' || g, 1000000 FROM generate_series(7, $1 - 1) g`, chaosAccounts); err != nil {
			t.Fatal(err)
		}
		st.row = func(ctx context.Context, msgID string) (status, lastError string, err error) {
			err = h.pool.QueryRow(ctx, rowSQL+`$1`, msgID).Scan(&status, &lastError)
			return status, lastError, err
		}
		st.outboxID = func(ctx context.Context, msgID string) (id int64, ok bool, err error) {
			err = h.pool.QueryRow(ctx, `SELECT id FROM outbox WHERE msg_id = $1`, msgID).Scan(&id)
			if errors.Is(err, pgx.ErrNoRows) {
				return 0, false, nil
			}
			return id, err == nil, err
		}
		st.lateTx = func(ctx context.Context, m outbox.Message, acct string, amount int, rollback bool) error {
			hold := time.Duration(100+rand.IntN(2900)) * time.Millisecond //nolint:gosec // pacing
			return h.heldTransferTx(ctx, m, acct, amount, rollback, hold)
		}
		st.dropRelayConns = func(ctx context.Context) (int, error) {
			var n int
			err := h.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1) t`, app).Scan(&n)
			return n, err
		}
		return h, st
	case "mysql":
		return newMySQLChaosStore(ctx, t, b)
	case "sqlite":
		h := newConsumerHarness(ctx, t, b)
		path := filepath.Join(t.TempDir(), "producer.db")
		db, err := outboxsqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		drv, err := outboxsqlite.New(db, outbox.Tables{})
		if err != nil {
			t.Fatal(err)
		}
		return h, sqlChaosStore(ctx, t, h, db, drv, "sqlite:"+path)
	}
	t.Fatalf("-chaos.db=%q: want postgres, mysql or sqlite", dialect)
	return nil, nil
}

// MySQLDSN is the MariaDB/MySQL server of the chaos run, in go-sql-driver's
// form (OUTBOX_TEST_MYSQL, as for the driver suite).
func MySQLDSN() string {
	if dsn := os.Getenv("OUTBOX_TEST_MYSQL"); dsn != "" {
		return dsn
	}
	return "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC&interpolateParams=true"
}

// newMySQLChaosStore creates a database of the run's own and a user that
// only the relays log in as, so that their sessions can be killed.
func newMySQLChaosStore(ctx context.Context, t *testing.T, b Broker) (*harness, *chaosStore) {
	h := newConsumerHarness(ctx, t, b)
	cfg, err := mysql.ParseDSN(MySQLDSN())
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err == nil {
		err = admin.PingContext(ctx)
	}
	if err != nil {
		t.Fatalf("MariaDB/MySQL at %s is required for -chaos.db=mysql: %v", cfg.Addr, err)
	}
	t.Cleanup(func() { admin.Close() })
	name := "outbox_chaos_" + randomHex(4)
	for _, q := range []string{
		"CREATE DATABASE " + name,
		"CREATE USER '" + name + "'@'%'",
		"GRANT ALL ON " + name + ".* TO '" + name + "'@'%'",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), "DROP USER '"+name+"'@'%'")
		_, _ = admin.ExecContext(context.Background(), "DROP DATABASE "+name)
	})
	pcfg := cfg.Clone()
	pcfg.DBName = name
	db, err := sql.Open("mysql", pcfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	drv, err := outboxmysql.New(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	// As on PostgreSQL, the server ends any transaction of the relays left
	// idle for a second (MariaDB's idle_transaction_timeout; MySQL has
	// none), so that no claim may depend on a transaction held open while
	// the broker publishes.
	relayDSN := fmt.Sprintf("mysql://%s@%s/%s", name, cfg.Addr, name)
	var version string
	if err := admin.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(version, "MariaDB") {
		relayDSN += "?idle_transaction_timeout=1"
	}
	st := sqlChaosStore(ctx, t, h, db, drv, relayDSN)
	st.dropRelayConns = func(ctx context.Context) (int, error) {
		rows, err := admin.QueryContext(ctx, `SELECT id FROM information_schema.processlist WHERE user = ?`, name)
		if err != nil {
			return 0, err
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return 0, err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, err
		}
		n := 0
		for _, id := range ids {
			// A session may have ended meanwhile: that is not an error here.
			if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err == nil {
				n++
			}
		}
		return n, nil
	}
	return h, st
}

// sqlChaosStore migrates a database/sql producer database and creates its
// accounts.
func sqlChaosStore(ctx context.Context, t *testing.T, h *harness, db *sql.DB, drv outboxdriver.Driver[*sql.Tx], relayDSN string) *chaosStore {
	t.Helper()
	var busy atomic.Int64
	t.Cleanup(func() {
		if n := busy.Load(); n > 0 {
			t.Logf("chaos: %d producer transactions found SQLite locked past the busy timeout and did not commit", n)
		}
	})
	if err := drv.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE accounts (id VARCHAR(16) PRIMARY KEY, balance BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for i := range chaosAccounts {
		if _, err := db.ExecContext(ctx, `INSERT INTO accounts (id, balance) VALUES (?, 1000000)`, fmt.Sprintf("acct-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	h.countOutbox = func(ctx context.Context, notSent bool) (n int, err error) {
		err = db.QueryRowContext(ctx, countOutboxSQL(notSent)).Scan(&n)
		return n, err
	}
	h.countLastError = func(ctx context.Context, like string) (n int, err error) {
		err = db.QueryRowContext(ctx, `SELECT count(*) FROM outbox WHERE last_error LIKE ?`, like).Scan(&n)
		return n, err
	}
	h.countDead = func(ctx context.Context) (n int, err error) {
		err = db.QueryRowContext(ctx, countDeadSQL).Scan(&n)
		return n, err
	}
	return &chaosStore{
		relayDSN: relayDSN,
		row: func(ctx context.Context, msgID string) (status, lastError string, err error) {
			err = db.QueryRowContext(ctx, rowSQL+`?`, msgID).Scan(&status, &lastError)
			return status, lastError, err
		},
		outboxID: func(ctx context.Context, msgID string) (id int64, ok bool, err error) {
			err = db.QueryRowContext(ctx, `SELECT id FROM outbox WHERE msg_id = ?`, msgID).Scan(&id)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, false, nil
			}
			return id, err == nil, err
		},
		tx: func(ctx context.Context, m outbox.Message, acct string, amount int, rollback bool) error {
			err := drv.RunInTx(context.WithoutCancel(ctx), func(_ context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance - ? WHERE id = ?`, amount, acct); err != nil {
					return err
				}
				if err := w.Write(ctx, tx, m); err != nil {
					return err
				}
				if rollback {
					return errRollback
				}
				return nil
			})
			if err != nil && sqliteRefused(relayDSN, err) {
				busy.Add(1)
				return errRollback
			}
			return err
		},
	}
}

// sqliteRefused reports whether a SQLite producer's transaction failed
// because the database stayed locked past the busy timeout: a relay process
// frozen inside a claim or a mark keeps SQLite's one write lock while it is
// stopped. A SQLite transaction that returns an error has not committed
// (RunInTx rolls it back), so the run counts it as rolled back.
func sqliteRefused(relayDSN string, err error) bool {
	return strings.HasPrefix(relayDSN, "sqlite:") && outbox.IsUnavailable(err) && strings.Contains(err.Error(), "SQLITE_BUSY")
}

// chaosBroker is the run's private broker.
type chaosBroker struct {
	Broker
	url  string // the relays' --broker
	addr string // the broker's host:port in url
	// newBroker is Broker through url: the subscriber's goes through a
	// proxy to addr (chaosSub).
	newBroker  func(url string) Broker
	what       string // for the log
	restart    func(t *testing.T)
	restartGap time.Duration // the least time between two restarts
	// down stops the broker, and up starts it again on the same port and
	// data.
	down, up func(t *testing.T)
	refusal  *refusal // how the broker refuses every publish for a while
	// streamOrder, where the broker keeps one ordered log, reads each
	// msg_id's first copy in it; nil elsewhere.
	streamOrder func(ctx context.Context) (map[string]storedCopy, error)
	orderName   string // what streamOrder's seq is, for the log
}

func newChaosBroker(t *testing.T, name string) *chaosBroker {
	t.Helper()
	cb := &chaosBroker{}
	switch name {
	case "nats":
		srv := startPrivate(t, natsSpec)
		cb.url = "nats://" + srv.addr() + "?stream=CHAOS&subject=chaos.{topic}&dead=chaosdead.{group}&dead_stream=CHAOS_DEAD&duplicates=100ms&ack_wait=5s&timeout=2s"
		cb.newBroker = natsBroker
		cb.what = "a private nats-server at " + srv.addr() + ", SIGKILLed and started again"
		cb.restart, cb.restartGap = srv.restart, 5*time.Second
		cb.down, cb.up = func(*testing.T) { srv.stop() }, srv.start
		cb.refusal = natsRefusal(srv.addr(), "CHAOS")
		cb.streamOrder = func(ctx context.Context) (map[string]storedCopy, error) {
			return natsStreamOrder(ctx, srv.addr(), "CHAOS")
		}
		cb.orderName = "JetStream stream sequence"
	case "amqp":
		node := rabbittest.Start(t)
		cb.url = node.URL + "?exchange=chaos&reconnect_delay=1s"
		cb.newBroker = amqpBroker
		cb.what = "a private RabbitMQ node, stopped and started again"
		cb.restart, cb.restartGap = func(t *testing.T) { node.Restart(t) }, 20*time.Second
		cb.down, cb.up = func(t *testing.T) { node.Stop(t) }, func(t *testing.T) { node.Start(t) }
		cb.refusal = amqpRefusal(node.URL, "chaos")
	case "redis":
		srv := startPrivate(t, redisSpec)
		cb.url = "redis://" + srv.addr() + "/0?stream=chaos:{topic}&minidle=200ms"
		cb.newBroker = redisBroker
		cb.what = "a private redis-server at " + srv.addr() + " (append-only file fsynced on every write), stopped and started again"
		cb.restart, cb.restartGap = srv.restart, 5*time.Second
		cb.down, cb.up = func(*testing.T) { srv.stop() }, srv.start
		cb.refusal = redisRefusal(srv.addr())
		cb.streamOrder = func(ctx context.Context) (map[string]storedCopy, error) {
			return redisStreamOrder(ctx, srv.addr(), "chaos:transfer.done")
		}
		cb.orderName = "Redis stream entry id"
	case "mqtt":
		srv := startPrivate(t, mosquittoSpec)
		cb.url = "mqtt://" + srv.addr() + "?topic=chaos/{topic}"
		cb.newBroker = mqttBroker
		cb.what = "a private mosquitto at " + srv.addr() + " (persistence on), stopped and started again"
		cb.restart, cb.restartGap = srv.restart, 5*time.Second
		cb.down, cb.up = func(*testing.T) { srv.stop() }, srv.start
		cb.refusal = mqttRefusal(srv)
	default:
		t.Fatalf("-chaos.broker=%q: want nats, amqp, redis or mqtt", name)
	}
	u, err := url.Parse(cb.url)
	if err != nil {
		t.Fatal(err)
	}
	cb.addr = u.Host
	cb.Broker = cb.newBroker(cb.url)
	cb.Name = "chaos"
	return cb
}

// via is the broker with its address in the URL replaced by addr (a
// proxy's), and query added to the URL's query.
func (cb *chaosBroker) via(addr, query string) Broker {
	b := cb.newBroker(strings.Replace(cb.url, cb.addr, addr, 1) + "&" + query)
	b.Name = cb.Name
	return b
}

package outboxpgx_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/drivertest"
	"github.com/outbox-go/outbox/outboxdriver"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if admin != nil {
		admin.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// baseDSN is the test server; the tests fail, not skip, when it is down.
func baseDSN() string {
	if dsn := os.Getenv("OUTBOX_TEST_POSTGRES"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test"
}

var (
	adminOnce sync.Once
	admin     *pgxpool.Pool
	adminErr  error
)

// newSchema makes a schema for one test and returns a DSN that uses it.
func newSchema(t *testing.T) string {
	t.Helper()
	adminOnce.Do(func() {
		admin, adminErr = pgxpool.New(context.Background(), baseDSN())
		if adminErr == nil {
			adminErr = admin.Ping(context.Background())
		}
	})
	if adminErr != nil {
		t.Fatalf("PostgreSQL at %s is required for these tests: %v", baseDSN(), adminErr)
	}
	b := make([]byte, 6)
	rand.Read(b)
	schema := "ot_" + hex.EncodeToString(b)
	if _, err := admin.Exec(context.Background(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	sep := "?"
	if strings.Contains(baseDSN(), "?") {
		sep = "&"
	}
	return baseDSN() + sep + "search_path=" + schema
}

// dollar rewrites '?' placeholders to PostgreSQL's $n.
func dollar(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// idleDSN is dsn with the session setting that has the server end a
// connection whose transaction stays idle for longer than d; the server's
// and the roles' own settings stay as they are.
func idleDSN(dsn string, d time.Duration) string {
	return dsn + "&idle_in_transaction_session_timeout=" + strconv.FormatInt(d.Milliseconds(), 10)
}

// idleEnded begins a transaction, waits past d, and returns nil only if the
// server ended it meanwhile.
func idleEnded(ctx context.Context, d time.Duration, begin func(context.Context) (func(context.Context) error, error)) error {
	use, err := begin(ctx)
	if err != nil {
		return err
	}
	time.Sleep(d + 500*time.Millisecond)
	if err := use(ctx); err == nil {
		return fmt.Errorf("a statement after %s idle in the transaction succeeded", d+500*time.Millisecond)
	}
	return nil
}

func setupPGX(t *testing.T) *drivertest.Env[pgx.Tx] {
	dsn := newSchema(t)
	pool, d := migratedPool(context.Background(), t, dsn, 0)
	return &drivertest.Env[pgx.Tx]{
		IdleInTxTimeout: func(t *testing.T, idle time.Duration) (outboxdriver.Store, func(context.Context) error) {
			short, err := pgxpool.New(context.Background(), idleDSN(dsn, idle))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(short.Close)
			st, err := outboxpgx.New(short, outbox.Tables{})
			if err != nil {
				t.Fatal(err)
			}
			return st, func(ctx context.Context) error {
				return idleEnded(ctx, idle, func(ctx context.Context) (func(context.Context) error, error) {
					tx, err := short.Begin(ctx)
					if err != nil {
						return nil, err
					}
					return func(ctx context.Context) error {
						defer tx.Rollback(context.WithoutCancel(ctx))
						_, err := tx.Exec(ctx, "SELECT 1")
						return err
					}, nil
				})
			}
		},
		Driver: d,
		WithTables: func(tb outbox.Tables) (outboxdriver.Driver[pgx.Tx], error) {
			return outboxpgx.New(pool, tb)
		},
		Exec: func(ctx context.Context, q string, args ...any) error {
			_, err := pool.Exec(ctx, dollar(q), args...)
			return err
		},
		QueryInt: func(ctx context.Context, q string, args ...any) (int64, error) {
			var n int64
			err := pool.QueryRow(ctx, dollar(q), args...).Scan(&n)
			return n, err
		},
		Begin:    func(ctx context.Context) (pgx.Tx, error) { return pool.Begin(ctx) },
		Commit:   func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
		Rollback: func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) },
		ExecTx: func(ctx context.Context, tx pgx.Tx, q string, args ...any) error {
			_, err := tx.Exec(ctx, dollar(q), args...)
			return err
		},
		ConcurrentWriters: true,
		IsUniqueViolation: outboxpgx.IsUniqueViolation,
	}
}

func setupStdlib(t *testing.T) *drivertest.Env[*sql.Tx] {
	dsn := newSchema(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := outboxpgx.NewStdlib(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	env := drivertest.SQLEnv(d, db, dollar, func(tb outbox.Tables) (outboxdriver.Driver[*sql.Tx], error) {
		return outboxpgx.NewStdlib(db, tb)
	}, true)
	env.IsUniqueViolation = outboxpgx.IsUniqueViolation
	env.IdleInTxTimeout = func(t *testing.T, idle time.Duration) (outboxdriver.Store, func(context.Context) error) {
		short, err := sql.Open("pgx", idleDSN(dsn, idle))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { short.Close() })
		st, err := outboxpgx.NewStdlib(short, outbox.Tables{})
		if err != nil {
			t.Fatal(err)
		}
		return st, func(ctx context.Context) error { return sqlIdleEnded(ctx, idle, short) }
	}
	return env
}

// sqlIdleEnded is idleEnded on a *sql.DB.
func sqlIdleEnded(ctx context.Context, idle time.Duration, db *sql.DB) error {
	return idleEnded(ctx, idle, func(ctx context.Context) (func(context.Context) error, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			defer tx.Rollback()
			_, err := tx.ExecContext(ctx, "SELECT 1")
			return err
		}, nil
	})
}

func TestPGX(t *testing.T)    { drivertest.Run(t, setupPGX) }
func TestStdlib(t *testing.T) { drivertest.Run(t, setupStdlib) }

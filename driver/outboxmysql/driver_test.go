package outboxmysql_test

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

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
	"github.com/outbox-go/outbox/drivertest"
	"github.com/outbox-go/outbox/outboxdriver"
)

func TestMain(m *testing.M) {
	code := m.Run()
	stopBinlogServer()
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
	if dsn := os.Getenv("OUTBOX_TEST_MYSQL"); dsn != "" {
		return dsn
	}
	return "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC&interpolateParams=true"
}

var (
	adminOnce sync.Once
	admin     *sql.DB
	adminErr  error
)

func setup(t *testing.T) *drivertest.Env[*sql.Tx] { return setupWith(t, func(*mysql.Config) {}) }

// setupWith is setup with the connections' settings changed by opt.
func setupWith(t *testing.T, opt func(*mysql.Config)) *drivertest.Env[*sql.Tx] {
	adminOnce.Do(func() {
		admin, adminErr = sql.Open("mysql", baseDSN())
		if adminErr == nil {
			adminErr = admin.Ping()
		}
	})
	if adminErr != nil {
		t.Fatalf("MariaDB/MySQL at %s is required for these tests: %v", baseDSN(), adminErr)
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "ot_" + hex.EncodeToString(b)
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE " + name) })
	cfg, err := mysql.ParseDSN(baseDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = name
	opt(cfg)
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := outboxmysql.New(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	env := drivertest.SQLEnv(d, db, nil, func(tb outbox.Tables) (outboxdriver.Driver[*sql.Tx], error) {
		return outboxmysql.New(db, tb)
	}, true)
	env.IsUniqueViolation = outboxmysql.IsUniqueViolation
	env.IdleInTxTimeout = func(t *testing.T, idle time.Duration) (outboxdriver.Store, func(context.Context) error) {
		// MariaDB's idle_transaction_timeout ends a session whose
		// transaction stays idle; MySQL has no such setting, and its
		// wait_timeout ends any session left idle.
		short := cfg.Clone()
		setting := "idle_transaction_timeout"
		var version string
		if err := admin.QueryRow("SELECT VERSION()").Scan(&version); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(version, "MariaDB") {
			setting = "wait_timeout"
		}
		if short.Params == nil {
			short.Params = map[string]string{}
		}
		short.Params[setting] = strconv.Itoa(int(idle.Seconds()))
		sdb, err := sql.Open("mysql", short.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sdb.Close() })
		st, err := outboxmysql.New(sdb, outbox.Tables{})
		if err != nil {
			t.Fatal(err)
		}
		return st, func(ctx context.Context) error {
			tx, err := sdb.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			time.Sleep(idle + 1500*time.Millisecond)
			if _, err := tx.ExecContext(ctx, "SELECT 1"); err == nil {
				return fmt.Errorf("a statement after %s idle in the transaction succeeded", idle+1500*time.Millisecond)
			}
			return nil
		}
	}
	return env
}

func TestMySQL(t *testing.T) { drivertest.Run(t, setup) }

// TestMySQLClientFoundRows: the whole suite again with clientFoundRows=true
// in the DSN, under which MySQL counts a row an UPDATE found but did not
// change as affected: nothing may read an affected-row count that this
// setting changes (the inbox once took "1 row" as "new" for a duplicate).
func TestMySQLClientFoundRows(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) *drivertest.Env[*sql.Tx] {
		return setupWith(t, func(c *mysql.Config) { c.ClientFoundRows = true })
	})
}

// A migration that MySQL stopped after its ALTER TABLE (which commits on its
// own) but before recording its version runs again without failing on the
// column it already added (version 2), or on the collation it already
// changed (version 3, whose MODIFY states the whole column again).
func TestMigrateAfterAnInterruptedAlter(t *testing.T) {
	env := setup(t)
	ctx := context.Background()
	latest, err := env.Driver.SchemaVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Exec(ctx, "DELETE FROM outbox_migrations WHERE version >= 2"); err != nil {
		t.Fatal(err)
	}
	if err := env.Driver.Migrate(ctx); err != nil {
		t.Fatalf("migrate again with dead_at and the NO PAD collation already there: %v", err)
	}
	if v, err := env.Driver.SchemaVersion(ctx); err != nil || v != latest {
		t.Fatalf("schema version %d, %v; want %d", v, err, latest)
	}
	// The columns are as version 1 made them, but for the collation.
	n, err := env.QueryInt(ctx, `SELECT count(*) FROM information_schema.columns
WHERE table_schema = DATABASE() AND column_type = 'varchar(64)' AND is_nullable = 'NO'
  AND column_default IS NULL AND character_set_name = 'utf8mb4'
  AND collation_name IN ('utf8mb4_nopad_bin', 'utf8mb4_0900_bin')
  AND ((table_name = 'outbox' AND column_name = 'msg_id')
    OR (table_name = 'consumed_msg' AND column_name IN ('consumer_group', 'msg_id')))`)
	if err != nil || n != 3 {
		t.Fatalf("%d of the 3 key columns are VARCHAR(64) NOT NULL with a NO PAD binary collation (%v)", n, err)
	}
}

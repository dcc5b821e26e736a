package clitest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // sql.Open("mysql", ...)
	_ "github.com/jackc/pgx/v5/stdlib" // sql.Open("pgx", ...)
	_ "modernc.org/sqlite"             // sql.Open("sqlite", ...)
)

// The tests run against the real databases of the test host. A database
// that cannot be reached fails the test: nothing skips.
const (
	// PGAdminDSN is the PostgreSQL the tests make their schemas in.
	PGAdminDSN = "postgres://postgres@127.0.0.1:5432/test"
	// MySQLAdminDSN is the MariaDB the tests make their databases in, as a
	// go-sql-driver DSN.
	MySQLAdminDSN = "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC"
)

// DB is one isolated database of a test: the --db URL the command gets and
// a handle for the test's own SQL.
type DB struct {
	DSN  string
	Conn *sql.DB
}

// UniqueName returns a new name for a schema, a database or a table.
func UniqueName() string {
	var b [6]byte
	rand.Read(b[:])
	return "outbox_cli_" + hex.EncodeToString(b[:])
}

// RandomHex returns 8 random hex digits, for names a test makes on a shared
// broker.
func RandomHex() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// OpenOrFail opens and pings dsn with driver, failing t with what when the
// database cannot be reached. The handle is closed when t ends.
func OpenOrFail(t *testing.T, driver, dsn, what string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = db.PingContext(ctx)
		cancel()
	}
	if err != nil {
		t.Fatalf("%s is needed by this test and cannot be reached: %v", what, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// NewPostgres returns a PostgreSQL schema of its own, dropped when t ends.
func NewPostgres(t *testing.T) *DB {
	t.Helper()
	admin := OpenOrFail(t, "pgx", PGAdminDSN, "PostgreSQL at 127.0.0.1:5432 (user postgres, trust auth, database test)")
	schema := UniqueName()
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	dsn := PGAdminDSN + "?search_path=" + schema
	return &DB{DSN: dsn, Conn: OpenOrFail(t, "pgx", dsn, "PostgreSQL")}
}

// NewMySQL returns a MariaDB database of its own, dropped when t ends.
func NewMySQL(t *testing.T) *DB {
	t.Helper()
	admin := OpenOrFail(t, "mysql", MySQLAdminDSN, "MariaDB at 127.0.0.1:3306 (user root, empty password, database test)")
	name := UniqueName()
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP DATABASE " + name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return &DB{DSN: "mysql://root@127.0.0.1:3306/" + name,
		Conn: OpenOrFail(t, "mysql", "root@tcp(127.0.0.1:3306)/"+name+"?parseTime=true&loc=UTC", "MariaDB")}
}

// NewSQLite returns a SQLite file of its own in t's temporary directory.
func NewSQLite(t *testing.T) *DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.db")
	return &DB{DSN: "sqlite:" + path,
		Conn: OpenOrFail(t, "sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)", "SQLite")}
}

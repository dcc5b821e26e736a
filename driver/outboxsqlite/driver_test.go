package outboxsqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
	"github.com/outbox-go/outbox/drivertest"
	"github.com/outbox-go/outbox/outboxdriver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func setup(t *testing.T) *drivertest.Env[*sql.Tx] {
	db, err := outboxsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := outboxsqlite.New(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	env := drivertest.SQLEnv(d, db, nil, func(tb outbox.Tables) (outboxdriver.Driver[*sql.Tx], error) {
		return outboxsqlite.New(db, tb)
	}, false)
	env.IsUniqueViolation = outboxsqlite.IsUniqueViolation
	return env
}

func TestSQLite(t *testing.T) { drivertest.Run(t, setup) }

// A new database file and its -wal and -shm files are readable by their
// owner only; a file that exists keeps its mode.
func TestOpenCreatesPrivateFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "outbox.db")
	db, err := outboxsqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := outboxsqlite.New(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s has mode %v, want -rw-------", filepath.Base(name), mode)
		}
	}
	db.Close()

	shared := filepath.Join(dir, "shared.db")
	if err := os.WriteFile(shared, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o640); err != nil { // whatever the umask
		t.Fatal(err)
	}
	db, err = outboxsqlite.Open(shared)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(shared); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("an existing file: %v, %v; want its mode -rw-r----- kept", fi.Mode(), err)
	}
}

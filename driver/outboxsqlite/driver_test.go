package outboxsqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
	"github.com/outbox-go/outbox/drivertest"
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
	env := drivertest.SQLEnv(d, db, nil, func(tb outbox.Tables) (outbox.Driver[*sql.Tx], error) {
		return outboxsqlite.New(db, tb)
	}, false)
	env.IsUniqueViolation = outboxsqlite.IsUniqueViolation
	return env
}

func TestSQLite(t *testing.T) { drivertest.Run(t, setup) }

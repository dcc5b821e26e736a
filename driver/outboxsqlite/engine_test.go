package outboxsqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
	"github.com/outbox-go/outbox/internal/sqlstore"
)

// TestEngineOf: the repository's own code finds the SQL engine under the
// driver, which does not export it.
func TestEngineOf(t *testing.T) {
	db, err := outboxsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := outboxsqlite.New(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	s, ok := sqlstore.Of(d)
	if !ok || s.Dialect() != "sqlite" {
		t.Fatalf("sqlstore.Of(driver) = %v, %v", s, ok)
	}
	sd, ok := sqlstore.SQLOf(d)
	if !ok || sd.SQLDB() != db || sd.Store != s {
		t.Fatalf("sqlstore.SQLOf(driver) = %v, %v", sd, ok)
	}
	if _, ok := sqlstore.Of(db); ok {
		t.Error("sqlstore.Of found an engine in a *sql.DB")
	}
}

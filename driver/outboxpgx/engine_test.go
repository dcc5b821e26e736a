package outboxpgx_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/internal/sqlstore"
)

// engine returns the SQL engine under d, for the plans the tests read.
func engine(t testing.TB, d any) *sqlstore.Store {
	t.Helper()
	s, ok := sqlstore.Of(d)
	if !ok {
		t.Fatalf("%T has no SQL engine", d)
	}
	return s
}

// TestEngineOf: the repository's own code finds the SQL engine under both
// drivers, which do not export it. Nothing connects.
func TestEngineOf(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://u:p@127.0.0.1:1/x")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	d, err := outboxpgx.New(pool, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", "postgres://u:p@127.0.0.1:1/x")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sd, err := outboxpgx.NewStdlib(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if s := engine(t, d); s.Dialect() != "postgres" {
		t.Errorf("engine of Driver: dialect %q", s.Dialect())
	}
	if _, ok := sqlstore.SQLOf(d); ok {
		t.Error("sqlstore.SQLOf found a database/sql driver under the pgx Driver")
	}
	if got, ok := sqlstore.SQLOf(sd); !ok || got.SQLDB() != db || engine(t, sd) != got.Store {
		t.Errorf("sqlstore.SQLOf(StdlibDriver) = %v, %v", got, ok)
	}
}

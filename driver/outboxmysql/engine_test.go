package outboxmysql_test

import (
	"database/sql"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
	"github.com/outbox-go/outbox/internal/sqlstore"
)

// TestEngineOf: the repository's own code finds the SQL engine under the
// driver and under a BinlogDriver, which do not export it. Nothing
// connects.
func TestEngineOf(t *testing.T) {
	db, err := sql.Open("mysql", "u:p@tcp(127.0.0.1:1)/x?parseTime=true")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := outboxmysql.New(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = "u", "tcp", "127.0.0.1:1", "x"
	bd, err := d.WithBinlog(outboxmysql.BinlogConfig{Conn: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer bd.Close()
	for _, v := range []any{d, bd} {
		s, ok := sqlstore.Of(v)
		if !ok || s.Dialect() != "mysql" {
			t.Fatalf("sqlstore.Of(%T) = %v, %v", v, s, ok)
		}
		if sd, ok := sqlstore.SQLOf(v); !ok || sd.SQLDB() != db {
			t.Fatalf("sqlstore.SQLOf(%T) = %v, %v", v, sd, ok)
		}
	}
}

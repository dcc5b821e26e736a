package outboxmysql_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
)

func TestBinlogConfig(t *testing.T) {
	if got := (outboxmysql.BinlogConfig{}).WithDefaults(); got.MaxBatch != 1000 {
		t.Errorf("MaxBatch defaults to %d, want 1000", got.MaxBatch)
	}
	if got := (outboxmysql.BinlogConfig{MaxBatch: 7}).WithDefaults(); got.MaxBatch != 7 {
		t.Errorf("WithDefaults changed MaxBatch 7 to %d", got.MaxBatch)
	}
	// sql.Open connects to nothing: the config is refused before any
	// connection.
	db, err := sql.Open("mysql", "u@tcp(127.0.0.1:1)/db")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := outboxmysql.New(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	tcp := &mysql.Config{Net: "tcp", Addr: "127.0.0.1:1", DBName: "db"}
	for _, c := range []struct {
		cfg  outboxmysql.BinlogConfig
		want string
	}{
		{outboxmysql.BinlogConfig{}, "Conn is nil"},
		{outboxmysql.BinlogConfig{Conn: &mysql.Config{Net: "pipe"}}, "Conn.Net"},
		{outboxmysql.BinlogConfig{Conn: tcp, MaxBatch: -1}, "MaxBatch"},
	} {
		if _, err := d.WithBinlog(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error about %s", c.cfg, err, c.want)
		}
	}
	bd, err := d.WithBinlog(outboxmysql.BinlogConfig{Conn: tcp})
	if err != nil {
		t.Fatal(err)
	}
	bd.Close()
}

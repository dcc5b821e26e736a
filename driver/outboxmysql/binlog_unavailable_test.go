package outboxmysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
	"github.com/outbox-go/outbox/outboxdriver"
)

// unavailable asserts that Stream and Watch of bd both return an error
// matching outboxdriver.ErrStreamUnavailable that contains want.
func unavailable(t *testing.T, bd *outboxmysql.BinlogDriver, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := map[string]error{
		"Stream": bd.Stream(ctx, func(context.Context, []outbox.Message) error { return nil }),
		"Watch":  bd.Watch(ctx, func(outboxdriver.Change) {}),
	}
	for name, err := range errs {
		if !errors.Is(err, outboxdriver.ErrStreamUnavailable) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s returned %v; want outboxdriver.ErrStreamUnavailable saying %q", name, err, want)
		}
		t.Logf("%s: %v", name, err)
	}
}

// The shared server writes no binary log: the stream is unavailable and
// says to turn log_bin on.
func TestBinlogUnavailableWithoutLogBin(t *testing.T) {
	setup(t) // connects admin
	var logBin int
	if err := admin.QueryRow("SELECT @@log_bin").Scan(&logBin); err != nil {
		t.Fatal(err)
	}
	if logBin != 0 {
		t.Fatalf("this test needs the server at %s with log_bin OFF; it has it ON", baseDSN())
	}
	cfg, err := mysql.ParseDSN(baseDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = "binlog_shared_" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	if _, err := admin.Exec("CREATE DATABASE " + cfg.DBName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE " + cfg.DBName) })
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := outboxmysql.New(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	bd, err := d.WithBinlog(outboxmysql.BinlogConfig{Conn: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer bd.Close()
	unavailable(t, bd, "log_bin")
}

// binlog_format other than ROW, and binlog_row_image other than FULL, are
// named with the setting to change.
func TestBinlogUnavailableNotRow(t *testing.T) {
	e := newBinlogEnv(t)
	t.Cleanup(func() {
		e.srv.root.Exec("SET GLOBAL binlog_format = 'ROW'")
		e.srv.root.Exec("SET GLOBAL binlog_row_image = 'FULL'")
	})
	e.srv.exec(t, "SET GLOBAL binlog_format = 'MIXED'")
	unavailable(t, e.bd, "binlog_format is MIXED: set binlog_format=ROW")
	e.srv.exec(t, "SET GLOBAL binlog_format = 'ROW'", "SET GLOBAL binlog_row_image = 'MINIMAL'")
	unavailable(t, e.bd, "binlog_row_image is MINIMAL: set binlog_row_image=FULL")
}

// A user without BINLOG MONITOR, or without REPLICATION SLAVE, is told the
// privilege it lacks and the GRANT that gives it; one with both (and the
// outbox table's) streams.
func TestBinlogPrivileges(t *testing.T) {
	e := newBinlogEnv(t)
	db := e.cfg.DBName
	for _, u := range []string{"nomon_" + db[7:], "norepl_" + db[7:], "repl_" + db[7:]} {
		e.srv.exec(t, "CREATE USER "+u+"@'%'", "GRANT ALL ON "+db+".* TO "+u+"@'%'")
		t.Cleanup(func() { e.srv.root.Exec("DROP USER " + u + "@'%'") })
	}
	e.srv.exec(t, "GRANT REPLICATION SLAVE ON *.* TO nomon_"+db[7:]+"@'%'",
		"GRANT BINLOG MONITOR ON *.* TO norepl_"+db[7:]+"@'%'",
		"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO repl_"+db[7:]+"@'%'")
	unavailable(t, e.binlog(t, e.srv.config("nomon_"+db[7:], db)),
		"'nomon_"+db[7:]+"'@'%' lacks BINLOG MONITOR")
	unavailable(t, e.binlog(t, e.srv.config("norepl_"+db[7:], db)),
		"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'norepl_"+db[7:]+"'@'%'")

	bd := e.binlog(t, e.srv.config("repl_"+db[7:], db))
	s := &streamed{}
	r := runStream(t, bd, outboxmysql.BinlogPosition{}, s)
	waitStarted(t, bd)
	insert(t, e.db, "p1")
	s.waitFor(t, "p1", 20*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}

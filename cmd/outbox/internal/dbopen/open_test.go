package dbopen

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

func TestMySQLConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dsn, want string }{
		{"mysql://app:p%40ss@db.example:3307/shop",
			"app:p@ss@tcp(db.example:3307)/shop?interpolateParams=true&parseTime=true&timeout=10s"},
		{"mysql://root@127.0.0.1/test?charset=utf8mb4&parseTime=false&timeout=3s&interpolateParams=false&sql_mode=%27ANSI%27",
			"root@tcp(127.0.0.1:3306)/test?charset=utf8mb4&parseTime=true&timeout=3s&sql_mode=%27ANSI%27"},
	} {
		cfg, err := mysqlConfig(tc.dsn, TLS{})
		if err != nil {
			t.Fatalf("%s: %v", tc.dsn, err)
		}
		// FormatDSN leaves out loc=UTC, the driver's default.
		if cfg.Loc != time.UTC {
			t.Errorf("%s: loc %v, want UTC", tc.dsn, cfg.Loc)
		}
		if got := cfg.FormatDSN(); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.dsn, got, tc.want)
		}
	}
	for _, dsn := range []string{"mysql://root@127.0.0.1:3306", "mysql://root@127.0.0.1:3306/", "mysql://root:pw123@h/db?tls=bogus"} {
		_, err := mysqlConfig(dsn, TLS{})
		if err == nil || strings.Contains(err.Error(), "pw123") {
			t.Errorf("%s: error %v", dsn, err)
		}
	}
}

func TestSQLitePath(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]string{
		"sqlite:app.db":            "app.db",
		"sqlite:data/app.db":       "data/app.db",
		"sqlite://data/app.db":     "data/app.db",
		"sqlite:///var/lib/app.db": "/var/lib/app.db",
		"sqlite:/var/lib/app.db":   "/var/lib/app.db",
		"sqlite:./with space/x.db": "./with space/x.db",
	} {
		if got, err := sqlitePath(dsn); err != nil || got != want {
			t.Errorf("sqlitePath(%q) = %q, %v; want %q", dsn, got, err, want)
		}
	}
	for _, dsn := range []string{"sqlite:", "sqlite://", "sqlite::memory:", "sqlite:file:x.db", "sqlite:x.db?mode=ro"} {
		if _, err := sqlitePath(dsn); err == nil {
			t.Errorf("sqlitePath(%q) accepted", dsn)
		}
	}
}

func TestOpenDatabaseRejectsBadTablesFirst(t *testing.T) {
	t.Parallel()
	// No database is contacted: the names are checked first.
	_, err := Open(t.Context(), "postgres://u:p@192.0.2.1:1/db", TLS{}, outbox.Tables{Outbox: "x;drop"})
	if !errors.Is(err, outbox.ErrInvalidIdentifier) {
		t.Fatalf("err = %v, want ErrInvalidIdentifier", err)
	}
}

package main

import (
	"errors"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
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
		cfg, err := mysqlConfig(tc.dsn, dbTLS{})
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
		_, err := mysqlConfig(dsn, dbTLS{})
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
	_, err := openDatabase(t.Context(), "postgres://u:p@192.0.2.1:1/db", dbTLS{}, outbox.Tables{Outbox: "x;drop"})
	if !errors.Is(err, outbox.ErrInvalidIdentifier) {
		t.Fatalf("err = %v, want ErrInvalidIdentifier", err)
	}
}

func TestOpenPublisher(t *testing.T) {
	t.Parallel()
	pub, closeFn, err := openPublisher(t.Context(), "discard:", publisherOptions{})
	if err != nil || pub != outbox.Discard {
		t.Fatalf("discard: %v, %v", pub, err)
	}
	closeFn()
	pub, closeFn, err = openPublisher(t.Context(), "https://user:pw-in-url@example.com/hook", publisherOptions{Source: "/x", WebhookSecrets: []string{"s3cret"}})
	if err != nil || pub == nil {
		t.Fatalf("https: %v", err)
	}
	closeFn()
	if got := scrub("sent to https://user:pw-in-url@example.com signed with s3cret"); strings.Contains(got, "pw-in-url") || strings.Contains(got, "s3cret") {
		t.Errorf("redact left a secret: %s", got)
	}
	for url, want := range map[string]string{
		"kafka://127.0.0.1:1":                    "broker unavailable",
		"amqp://guest:pw-in-url@127.0.0.1:1/":    "broker unavailable",
		"redis://127.0.0.1:1/0":                  "broker unavailable",
		"nats://127.0.0.1:1":                     "broker unavailable",
		"nats://127.0.0.1:4222?bogus=1":          `unknown URL parameter "bogus"`,
		"amqp://guest:guest@127.0.0.1:5672/?x=1": `unknown URL parameter "x"`,
		"mqtt://127.0.0.1:1883?qos=0":            "QoS 0 is not supported",
		"ftp://h":                                `unknown broker scheme "ftp"`,
		"nothing":                                "not a broker URL",
		"http://":                                "no host",
	} {
		_, closeFn, err := openPublisher(t.Context(), url, publisherOptions{})
		if err == nil {
			closeFn()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("openPublisher(%q): %v, want %q", url, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "pw-in-url") || !strings.Contains(err.Error(), "check --broker") && strings.Contains(url, "127.0.0.1")) {
			t.Errorf("openPublisher(%q): %v shows the password or does not say what to check", url, err)
		}
	}
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	for flag, want := range map[string]string{"db": "OUTBOX_DB", "inbox-table": "OUTBOX_INBOX_TABLE", "webhook-secret": "OUTBOX_WEBHOOK_SECRET"} {
		if got := cli.EnvName(flag); got != want {
			t.Errorf("cli.EnvName(%q) = %q, want %q", flag, got, want)
		}
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	in := "failed to connect to `user=postgres`:\n\thost: refused\n\thost: refused"
	if got, want := cli.OneLine(in), "failed to connect to `user=postgres`: host: refused"; got != want {
		t.Errorf("oneLine = %q, want %q", got, want)
	}
}

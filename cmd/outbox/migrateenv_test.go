package main

import (
	"strings"
	"testing"
)

// TestMigrateReadsDatabaseTLSVariables: migrate takes the database's TLS
// settings from OUTBOX_DB_TLS_* as every command does, while its modes stay
// on the command line.
func TestMigrateReadsDatabaseTLSVariables(t *testing.T) {
	t.Parallel()
	r := runCLI(t, []string{"OUTBOX_DB_TLS_CA=/nonexistent/outbox-ca.pem"},
		"migrate", "--db", "postgres://postgres@127.0.0.1:5432/test", "--check")
	if r.code == 0 || !strings.Contains(r.stderr, "/nonexistent/outbox-ca.pem") {
		t.Errorf("OUTBOX_DB_TLS_CA did not reach migrate: %s", r)
	}
	help := commandHelp(t, "migrate")
	for _, want := range []string{"env OUTBOX_DB_TLS_CA)", "env OUTBOX_DB_TLS_CERT)", "(command line only)"} {
		if !strings.Contains(help, want) {
			t.Errorf("migrate --help lacks %q", want)
		}
	}
}

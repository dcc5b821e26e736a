package main

import (
	"strings"
	"testing"
)

// TestCleanupBatchVariable: cleanup's --batch reads OUTBOX_CLEANUP_BATCH,
// and OUTBOX_BATCH (the relay's --batch) only as a deprecated fallback,
// with a warning.
func TestCleanupBatchVariable(t *testing.T) {
	t.Parallel()
	b := newSQLite(t)
	mustRun(t, "migrate", "--db", b.dsn)
	args := []string{"cleanup", "--db", b.dsn, "--older-than", "1h"}
	const warning = "warning: OUTBOX_BATCH is deprecated for --batch and will stop working; set OUTBOX_CLEANUP_BATCH instead"

	r := runCLI(t, []string{"OUTBOX_CLEANUP_BATCH=0"}, args...)
	if r.code != 2 || !strings.Contains(r.stderr, "--batch 0 is out of range") || strings.Contains(r.stderr, "warning") {
		t.Errorf("OUTBOX_CLEANUP_BATCH=0: %s", r)
	}
	r = runCLI(t, []string{"OUTBOX_BATCH=0"}, args...)
	if r.code != 2 || !strings.Contains(r.stderr, warning) || !strings.Contains(r.stderr, "--batch 0 is out of range") {
		t.Errorf("OUTBOX_BATCH=0: %s", r)
	}
	r = runCLI(t, []string{"OUTBOX_CLEANUP_BATCH=5", "OUTBOX_BATCH=0"}, args...)
	if r.code != 0 || strings.Contains(r.stderr, "warning") {
		t.Errorf("OUTBOX_CLEANUP_BATCH=5 beside the relay's OUTBOX_BATCH=0: %s", r)
	}
	if help := commandHelp(t, "cleanup"); !strings.Contains(help, "env OUTBOX_CLEANUP_BATCH)") {
		t.Errorf("cleanup --help does not name OUTBOX_CLEANUP_BATCH:\n%s", help)
	}
}

package bench

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/outbox-go/outbox/internal/testbroker"
)

var cdcResultLine = regexp.MustCompile(`^result cdc_msgs_per_s=([0-9]+) poll_msgs_per_s=([0-9]+) cdc_ratio=[0-9.]+$`)

// bench --cdc on a cluster with wal_level = logical measures both relays.
func TestBenchCDC(t *testing.T) {
	t.Parallel()
	pg := testbroker.StartPostgres(t, "wal_level = logical\nmax_replication_slots = 10\nmax_wal_senders = 10\n")
	var out, errb bytes.Buffer
	args := []string{"--db", pg.DSN(), "--table", "hcdcbench_outbox", "--inbox-table", "hcdcbench_inbox", "--cdc", "--messages", "2000", "--runs", "1"}
	if err := Run(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("bench %v: %v\n%s%s", args, err, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	m := cdcResultLine.FindStringSubmatch(lines[len(lines)-1])
	if m == nil {
		t.Fatalf("last line %q does not match %s\n%s", lines[len(lines)-1], cdcResultLine, out.String())
	}
	for _, v := range m[1:3] {
		if n, _ := strconv.Atoi(v); n <= 0 {
			t.Fatalf("a rate of 0 in %q\n%s", m[0], out.String())
		}
	}
	if !strings.Contains(out.String(), "run 1 cdc: 2000 msgs") || !strings.Contains(out.String(), "run 1 polling: 2000 msgs") {
		t.Fatalf("no per-run figures of both relays:\n%s", out.String())
	}
}

// bench --cdc refuses a server without wal_level = logical and a database
// other than PostgreSQL, saying what to change.
func TestBenchCDCRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ db, want string }{
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "set wal_level = logical"},
		{"sqlite:" + filepath.Join(t.TempDir(), "bench.db"), "give a postgres:// --db"},
	} {
		var out, errb bytes.Buffer
		err := Run(context.Background(), []string{"--db", c.db, "--table", "hcdcbench_refuse", "--inbox-table", "hcdcbench_refuse_inbox",
			"--cdc", "--messages", "10"}, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("bench --cdc --db %s: error %v, want one saying %q", c.db, err, c.want)
		}
	}
}

package bench

import (
	"bytes"
	"context"
	"github.com/outbox-go/outbox/cmd/outbox/internal/clitest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var rateResultLine = regexp.MustCompile(`^result rate=[0-9]+ p50_ms=[0-9.]+ p99_ms=[0-9.]+ max_ms=[0-9.]+ producer_ratio=[0-9.]+( idle_pct=[0-9.]+)?$`)

// bench --rate publishes every message it commits and ends with the result
// line scripts parse; --idle adds the idle cost.
func TestBenchRate(t *testing.T) {
	t.Parallel()
	pg := clitest.NewPostgres(t)
	for _, args := range [][]string{
		{"--db", "sqlite:" + filepath.Join(t.TempDir(), "rate.db"), "--producer", "writer"},
		{"--db", pg.DSN, "--producer", "sql", "--idle", "500ms"},
	} {
		var out, errb bytes.Buffer
		args = append(args, "--rate", "100", "--duration", "500ms", "--producers", "4")
		if err := Run(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("bench %v: %v\n%s", args, err, errb.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if last := lines[len(lines)-1]; !rateResultLine.MatchString(last) {
			t.Fatalf("bench %v: last line %q does not match %s\n%s", args, last, rateResultLine, out.String())
		}
		if !regexp.MustCompile(`run 1: .* [1-9][0-9]* published`).MatchString(out.String()) {
			t.Fatalf("bench %v: no message published:\n%s", args, out.String())
		}
	}
}

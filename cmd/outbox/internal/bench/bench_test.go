package bench

import (
	"bytes"
	"context"
	"github.com/outbox-go/outbox/cmd/outbox/internal/clitest"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

var resultLine = regexp.MustCompile(`^result msgs_per_s=[0-9]+ p50_ms=[0-9.]+ p99_ms=[0-9.]+$`)

// The bench's last line is a contract: scripts parse it.
func TestBenchResultLine(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--messages", "3000", "--batch", "500", "--runs", "2"},
		{"--messages", "2000", "--batch", "200", "--relays", "2", "--producers", "2"},
	} {
		db := "sqlite:" + filepath.Join(t.TempDir(), "bench.db")
		var out, errb bytes.Buffer
		if err := Run(context.Background(), append([]string{"--db", db}, args...), &out, &errb); err != nil {
			t.Fatalf("bench %v: %v\n%s", args, err, errb.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if last := lines[len(lines)-1]; !resultLine.MatchString(last) {
			t.Fatalf("bench %v: last line %q does not match %s\n%s", args, last, resultLine, out.String())
		}
		// Each run says where a relay's time went; a relay always spends
		// some of it claiming.
		stages := regexp.MustCompile(`(?m)^run 1: .*a relay's time in claims ([0-9]+)%, publishes [0-9]+%, marks [0-9]+%`).FindStringSubmatch(out.String())
		if stages == nil || stages[1] == "0" {
			t.Fatalf("bench %v: run 1 gives no stage times, or no time in claims:\n%s", args, out.String())
		}
	}
}

func TestBenchPostgresBaselineAndWriter(t *testing.T) {
	t.Parallel()
	b := clitest.NewPostgres(t)
	var out, errb bytes.Buffer
	if err := Run(context.Background(), []string{"--db", b.DSN, "--messages", "2000", "--runs", "1", "--baseline"}, &out, &errb); err != nil {
		t.Fatalf("bench: %v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), "relay/baseline = ") {
		t.Fatalf("no baseline ratio:\n%s", out.String())
	}
	out.Reset()
	if err := Run(context.Background(), []string{"--db", b.DSN, "--writer", "--producers", "2", "--runs", "1", "--round", "700ms"}, &out, &errb); err != nil {
		t.Fatalf("bench --writer: %v\n%s", err, errb.String())
	}
	if !regexp.MustCompile(`(?m)^result writer_ratio=[0-9.]+ order_ratio=[0-9.]+ base_tx_per_s=[0-9]+ outbox_tx_per_s=[0-9]+ batched_ratio=[0-9.]+ on_commit_ratio=[0-9.]+$`).MatchString(out.String()) {
		t.Fatalf("writer bench output:\n%s", out.String())
	}
}

// --scaling runs one relay before each run of --relays N, and prints the
// ratio and how far the cores would let it go.
func TestBenchScaling(t *testing.T) {
	t.Parallel()
	b := clitest.NewPostgres(t)
	var out, errb bytes.Buffer
	if err := Run(context.Background(), []string{"--db", b.DSN, "--messages", "3000", "--batch", "200", "--relays", "2", "--scaling", "--runs", "2"}, &out, &errb); err != nil {
		t.Fatalf("bench --scaling: %v\n%s", err, errb.String())
	}
	for _, re := range []string{
		`(?m)^run 1 one relay: 3000 msgs in .* = [0-9]+ msgs/s`,
		`(?m)^run 2 scaling: 2 relays / one relay = [0-9.]+; one relay kept the cores [0-9]+% busy at [0-9.]+µs/msg, so at that CPU per message the cores allow at most [0-9.]+ `,
		`(?m)^median 2 relays / one relay = [0-9.]+$`,
		`(?m)^median CPU cap of that ratio, from the cores the run had = [0-9.]+$`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("output lacks %s:\n%s", re, out.String())
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !resultLine.MatchString(last) {
		t.Errorf("last line %q does not match %s", last, resultLine)
	}
}

func TestScalingCap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		relays int
		util   float64
		want   float64
	}{
		{2, 0.6, 1 / 0.6}, // the cores: 60% busy leaves room for 1.67 times
		{2, 0.25, 2},      // n relays: never more than n times one
		{3, 0.5, 2},
		{2, 1, 1},
	} {
		if got := scalingCap(tc.relays, tc.util); got != tc.want {
			t.Errorf("scalingCap(%d, %v) = %v, want %v", tc.relays, tc.util, got, tc.want)
		}
	}
}

// A round that commits nothing in its length runs on until its first commit,
// and its rate counts the whole time it ran.
func TestWriterRoundWaitsForFirstCommit(t *testing.T) {
	t.Parallel()
	b := clitest.NewPostgres(t)
	ctx := context.Background()
	d, err := dbopen.Open(ctx, b.DSN, dbopen.TLS{}, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := execScript(ctx, d, benchBusinessSQL["postgres"][0]); err != nil {
		t.Fatal(err)
	}
	lock, err := b.Conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec("LOCK TABLE outbox_bench_orders IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	const held = 1500 * time.Millisecond
	go func() {
		time.Sleep(held)
		_ = lock.Rollback()
	}()
	start := time.Now()
	rate, err := writerRound(ctx, d, "order", 2, 100*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); rate <= 0 || took < held {
		t.Fatalf("round behind a lock of %s: %.1f tx/s after %s; want a positive rate after the lock", held, rate, took)
	}
}

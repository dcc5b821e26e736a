package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
		if err := runBench(context.Background(), append([]string{"--db", db}, args...), &out, &errb); err != nil {
			t.Fatalf("bench %v: %v\n%s", args, err, errb.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if last := lines[len(lines)-1]; !resultLine.MatchString(last) {
			t.Fatalf("bench %v: last line %q does not match %s\n%s", args, last, resultLine, out.String())
		}
	}
}

func TestBenchPostgresBaselineAndWriter(t *testing.T) {
	t.Parallel()
	b := newPostgres(t)
	var out, errb bytes.Buffer
	if err := runBench(context.Background(), []string{"--db", b.dsn, "--messages", "2000", "--runs", "1", "--baseline"}, &out, &errb); err != nil {
		t.Fatalf("bench: %v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), "relay/baseline = ") {
		t.Fatalf("no baseline ratio:\n%s", out.String())
	}
	out.Reset()
	if err := runBench(context.Background(), []string{"--db", b.dsn, "--writer", "--producers", "2", "--runs", "1", "--round", "700ms"}, &out, &errb); err != nil {
		t.Fatalf("bench --writer: %v\n%s", err, errb.String())
	}
	if !regexp.MustCompile(`(?m)^result writer_ratio=[0-9.]+ order_ratio=[0-9.]+ base_tx_per_s=[0-9]+ outbox_tx_per_s=[0-9]+$`).MatchString(out.String()) {
		t.Fatalf("writer bench output:\n%s", out.String())
	}
}

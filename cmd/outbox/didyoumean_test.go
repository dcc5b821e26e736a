package main

import (
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"strings"
	"testing"
)

func TestClosest(t *testing.T) {
	t.Parallel()
	names := []string{"batch", "broker", "metrics-addr", "admin-addr", "db"}
	for in, want := range map[string]string{
		"bach":          "batch",
		"brokr":         "broker",
		"metrics-adr":   "metrics-addr",
		"metricsaddr":   "metrics-addr",
		"admin-adr":     "admin-addr",
		"dv":            "db",
		"zzz":           "",
		"workers":       "",
		"batch":         "batch",
		"totally-other": "",
	} {
		if got := cli.Closest(in, names); got != want {
			t.Errorf("cli.Closest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDidYouMean(t *testing.T) {
	t.Parallel()
	checkError(t, runCLI(t, nil, "rely"), 2, `unknown command "rely"; did you mean "relay"?`)
	checkError(t, runCLI(t, nil, "relay", "--bach", "5"), 2, "unknown flag --bach; did you mean --batch?")
	checkError(t, runCLI(t, nil, "dead", "list", "--limt", "5"), 2, "did you mean --limit?")
	r := runCLI(t, nil, "stats", "--zzz")
	checkError(t, r, 2, "unknown flag --zzz")
	if strings.Contains(r.stderr, "did you mean") {
		t.Errorf("a suggestion for a flag nothing resembles: %s", r.stderr)
	}
}

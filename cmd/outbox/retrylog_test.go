package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRelayLogsRetriesRateLimited: a message the endpoint refuses again and
// again is logged at info level when it is set for retry, one line per 10s
// at most however often it fails.
func TestRelayLogsRetriesRateLimited(t *testing.T) {
	t.Parallel()
	var refusals atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refusals.Add(1)
		http.Error(w, "cannot take it", http.StatusUnprocessableEntity)
	}))
	t.Cleanup(srv.Close)
	b := newSQLite(t)
	mustRun(t, "migrate", "--db", b.dsn)
	b.insert(t, "refused", "order.paid", `{}`)
	var stderr func() string
	stop := startRelayLogged(t, &stderr, nil, "--db", b.dsn, "--broker", srv.URL+"/hook", "--interval", "20ms",
		"--retry-base", "10ms", "--retry-max", "20ms", "--max-retries", "1000")
	waitFor(t, "5 refusals", 30*time.Second, func() bool { return refusals.Load() >= 5 })
	r := stop()
	if r.code != 0 {
		t.Fatalf("relay: %s", r)
	}
	var lines []string
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.Contains(l, "message refused; it will be retried") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d lines about the retried message after %d refusals in under 10s, want 1:\n%s", len(lines), refusals.Load(), r.stderr)
	}
	for _, want := range []string{"level=INFO", "msg_id=refused", "topic=order.paid", "failures=1", "422", "cannot take it"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("the line lacks %q: %s", want, lines[0])
		}
	}
}

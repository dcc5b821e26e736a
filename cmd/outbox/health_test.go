package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	healthURL     = regexp.MustCompile(`serving health checks" server=--metrics-addr url=(http://\S+)/readyz`)
	adminStatsURL = regexp.MustCompile(`serving the admin API" url=(http://\S+)/admin/stats`)
)

// probe GETs url and returns the status code and the body, 0 when the
// server cannot be reached.
func probe(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitProbe waits until url answers code with a body containing want.
func waitProbe(t *testing.T, url string, code int, want string, timeout time.Duration) {
	t.Helper()
	var got int
	var body string
	deadline := time.Now().Add(timeout)
	for {
		if got, body = probe(t, url); got == code && strings.Contains(body, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q after %s, want %d with %q", url, got, body, timeout, code, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// webhookEndpoint answers 200 to every request on a fixed port that the
// test can close (connections are refused) and open again.
type webhookEndpoint struct {
	addr string
	srv  *http.Server
}

func (e *webhookEndpoint) open(t *testing.T) {
	t.Helper()
	addr := e.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	for range 100 { // the port may linger for a moment after close
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	e.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}), ReadHeaderTimeout: 5 * time.Second}
	go e.srv.Serve(ln)
	t.Cleanup(func() { e.srv.Close() })
}

func (e *webhookEndpoint) close() { e.srv.Close() }

// TestRelayHealth runs a relay that publishes to a webhook and probes
// /healthz and /readyz on the metrics and the admin server: ready while the
// endpoint answers, not ready with the reason while it refuses connections,
// ready again once it is back; the admin token does not guard either path.
func TestRelayHealth(t *testing.T) {
	t.Parallel()
	eachBackend(t, true, func(t *testing.T, b *backend) {
		ep := &webhookEndpoint{}
		ep.open(t)
		var stderr func() string
		stop := startRelayLogged(t, &stderr, []string{"OUTBOX_ADMIN_TOKEN=s3cret-admin-token"},
			"--db", b.dsn, "--broker", "http://"+ep.addr+"/events", "--interval", "50ms", "--probe-interval", "100ms",
			"--retry-base", "100ms", "--retry-max", "200ms", "--webhook-timeout", "2s",
			"--metrics-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
		metrics := urlInLog(t, stderr, healthURL)
		admin := urlInLog(t, stderr, adminStatsURL)

		b.insert(t, "first", "order.paid", `{}`)
		waitFor(t, "the first message SENT", 30*time.Second, func() bool { return b.status(t, "first") == 1 })
		for _, base := range []string{metrics, admin} {
			waitProbe(t, base+"/readyz", 200, "ready\n", 10*time.Second)
			if code, body := probe(t, base+"/healthz"); code != 200 || body != "ok\n" {
				t.Errorf("GET %s/healthz: %d %q", base, code, body)
			}
		}
		if code, _ := probe(t, admin+"/admin/stats"); code != http.StatusUnauthorized {
			t.Errorf("GET /admin/stats without the token: %d, want 401 (the health paths alone are open)", code)
		}

		ep.close()
		for i := range 20 {
			b.insert(t, fmt.Sprintf("down-%d", i), "order.paid", `{}`)
		}
		for _, base := range []string{metrics, admin} {
			waitProbe(t, base+"/readyz", 503, "not ready: broker outage since ", 30*time.Second)
			if code, _ := probe(t, base+"/healthz"); code != 200 {
				t.Errorf("GET %s/healthz during the outage: %d, want 200", base, code)
			}
		}
		_, body := probe(t, metrics+"/readyz")
		if !strings.Contains(body, ep.addr) || !strings.Contains(body, "connect") {
			t.Errorf("/readyz during the outage does not say why: %q", body)
		}

		ep.open(t)
		for _, base := range []string{metrics, admin} {
			waitProbe(t, base+"/readyz", 200, "ready\n", 30*time.Second)
		}
		waitFor(t, "every message SENT", 30*time.Second, func() bool { return b.count(t, "status = 1") == 21 })
		if r := stop(); r.code != 0 {
			t.Fatalf("relay after SIGTERM: %s", r)
		}
	})
}

// TestRelayWaitsForBroker starts a relay whose NATS server is not there
// yet: the relay stays up, /healthz answers 200 and /readyz 503 with the
// reason; once a nats-server starts on that port the relay connects,
// becomes ready and publishes.
func TestRelayWaitsForBroker(t *testing.T) {
	t.Parallel()
	natsServer, err := exec.LookPath("nats-server")
	if err != nil {
		t.Fatalf("nats-server is not on PATH: %v", err)
	}
	b := newSQLite(t)
	mustRun(t, "migrate", "--db", b.dsn)
	b.insert(t, "waited", "order.paid", `{}`)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	var stderr func() string
	stop := startRelayLogged(t, &stderr, nil, "--db", b.dsn,
		"--broker", fmt.Sprintf("nats://127.0.0.1:%d?stream=HEALTH&subject=health.{topic}", port),
		"--interval", "50ms", "--metrics-addr", "127.0.0.1:0")
	base := urlInLog(t, stderr, healthURL)
	waitProbe(t, base+"/readyz", 503, "not ready: connecting to the broker: ", 30*time.Second)
	waitFor(t, "the log to say the broker cannot be reached", 30*time.Second, func() bool {
		return strings.Contains(stderr(), "cannot reach the broker; trying again")
	})
	time.Sleep(2 * time.Second)
	if code, _ := probe(t, base+"/healthz"); code != 200 {
		t.Fatalf("GET /healthz while waiting for the broker: %d, want 200\n%s", code, stderr())
	}
	if code, body := probe(t, base+"/readyz"); code != 503 || !strings.Contains(body, "connecting to the broker") ||
		!stringsContainsPort(body, port) {
		t.Fatalf("GET /readyz while waiting for the broker: %d %q", code, body)
	}

	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := exec.CommandContext(ctx, natsServer, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", dir,
		"-l", filepath.Join(dir, "nats.log"))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = srv.Wait()
	})
	waitProbe(t, base+"/readyz", 200, "ready\n", 60*time.Second)
	waitFor(t, "the message SENT", 30*time.Second, func() bool { return b.status(t, "waited") == 1 })
	r := stop()
	if r.code != 0 || !strings.Contains(r.stderr, "connected to the broker") {
		t.Fatalf("relay: %s", r)
	}
	if log, err := os.ReadFile(filepath.Join(dir, "nats.log")); err == nil && t.Failed() {
		t.Logf("nats-server log:\n%s", log)
	}
}

func stringsContainsPort(s string, port int) bool { return strings.Contains(s, ":"+strconv.Itoa(port)) }

// TestRelayBrokerConfigErrorExits checks that a broker URL that cannot
// work ends the relay at once instead of being waited for.
func TestRelayBrokerConfigErrorExits(t *testing.T) {
	t.Parallel()
	b := newSQLite(t)
	mustRun(t, "migrate", "--db", b.dsn)
	start := time.Now()
	r := runCLI(t, nil, "relay", "--db", b.dsn, "--broker", "nats://127.0.0.1:4222?stream=bad.name")
	if r.code == 0 || time.Since(start) > 20*time.Second || strings.Contains(r.stderr, "trying again") {
		t.Fatalf("relay with a bad NATS stream name: %s (after %s)", r, time.Since(start))
	}
}

// TestRelayWaitsForBrokerDown: a broker refusing connections at start-up
// keeps the relay up, logging why without the password, until SIGTERM.
func TestRelayWaitsForBrokerDown(t *testing.T) {
	t.Parallel()
	b := newSQLite(t)
	mustRun(t, "migrate", "--db", b.dsn)
	var stderr func() string
	stop := startRelayLogged(t, &stderr, nil, "--db", b.dsn, "--broker", "amqp://guest:hunter22@127.0.0.1:1/")
	waitFor(t, "the relay to wait for the broker", 30*time.Second, func() bool {
		return strings.Contains(stderr(), "cannot reach the broker; trying again")
	})
	r := stop()
	if r.code != 0 || !strings.Contains(r.stderr, "connection refused") || !strings.Contains(r.stderr, "check --broker") ||
		!strings.Contains(r.stderr, "relay stopped during start-up") || strings.Contains(r.stderr, "hunter22") {
		t.Fatalf("relay waiting for a broker that refuses connections: %s", r)
	}
}

// TestRelayReadinessSchema: /readyz turns 503 with the reason while the
// tables' recorded schema version is older than the relay needs, and 200
// again once it is back.
func TestRelayReadinessSchema(t *testing.T) {
	t.Parallel()
	eachBackend(t, true, func(t *testing.T, b *backend) {
		var stderr func() string
		stop := startRelayLogged(t, &stderr, nil, "--db", b.dsn, "--broker", "discard:", "--interval", "50ms",
			"--metrics-addr", "127.0.0.1:0")
		base := urlInLog(t, stderr, healthURL)
		waitProbe(t, base+"/readyz", 200, "ready\n", 30*time.Second)
		b.exec(t, "CREATE TABLE saved_migrations AS SELECT * FROM outbox_migrations WHERE version >= 2")
		b.exec(t, "DELETE FROM outbox_migrations WHERE version >= 2")
		waitProbe(t, base+"/readyz", 503, "not ready: the outbox tables are at schema version 1 and this relay needs version ", 10*time.Second)
		_, body := probe(t, base+"/readyz")
		if !strings.Contains(body, "run 'outbox migrate'") {
			t.Errorf("/readyz does not say what to do: %q", body)
		}
		b.exec(t, "INSERT INTO outbox_migrations SELECT * FROM saved_migrations")
		waitProbe(t, base+"/readyz", 200, "ready\n", 10*time.Second)
		if r := stop(); r.code != 0 {
			t.Fatalf("relay: %s", r)
		}
	})
}

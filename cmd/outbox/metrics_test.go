package main

import (
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/clitest"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

var metricsURL = regexp.MustCompile(`url=(http://\S+/metrics)`)

// TestRelayMetrics runs a relay with --metrics-addr on a free port and
// scrapes it over HTTP: the relay's counters, the table's backlog, the Go
// runtime's and the process's series; SIGTERM stops the server with the
// relay.
func TestRelayMetrics(t *testing.T) {
	t.Parallel()
	eachBackend(t, true, func(t *testing.T, b *backend) {
		for i := 1; i <= 5; i++ {
			b.insert(t, fmt.Sprintf("order-%d:OrderPaid", i), "order.paid", `{}`)
		}
		b.insert(t, "user-1:Created", "user.created", `{}`)
		var stderr func() string
		stop := startRelayLogged(t, &stderr, []string{"OUTBOX_METRICS_ADDR=127.0.0.1:0"},
			"--db", b.dsn, "--broker", "discard:", "--interval", "50ms")
		url := urlInLog(t, stderr, metricsURL)
		waitFor(t, "all rows SENT", 30*time.Second, func() bool { return b.count(t, "status = 1") == 6 })
		var body string
		waitFor(t, "the counters and an empty backlog", 30*time.Second, func() bool {
			body = clitest.Scrape(t, url)
			return strings.Contains(body, `outbox_relay_messages_total{outcome="sent",topic="order.paid"} 5`) &&
				strings.Contains(body, "\noutbox_pending_messages 0\n")
		})
		for _, want := range []string{
			`outbox_relay_messages_total{outcome="sent",topic="user.created"} 1`,
			`outbox_relay_messages_total{outcome="dead",topic="order.paid"} 0`,
			"\noutbox_relay_batches_total ",
			`outbox_relay_stage_duration_seconds_bucket{stage="publish",le="0.001"}`,
			"\noutbox_relay_last_batch_timestamp_seconds ",
			"\noutbox_pending_oldest_age_seconds 0\n",
			"\noutbox_backlog_up 1\n",
			"\ngo_goroutines ",
			"\nprocess_cpu_seconds_total ",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("the metrics lack %q:\n%s", want, body)
			}
		}
		if !strings.Contains(body, "\noutbox_dead_messages 0\n") {
			t.Errorf("outbox_dead_messages 0 not reported on %s (every dialect counts DEAD rows through an index)", b.name)
		}
		r := stop()
		if r.code != 0 {
			t.Fatalf("relay after SIGTERM: %s", r)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("the metrics server still answers after the relay stopped: %s", resp.Status)
		}
	})
}

// urlInLog waits until the relay's log has a line that re matches and
// returns re's first group: the URL a server of the relay listens at.
func urlInLog(t *testing.T, stderr func() string, re *regexp.Regexp) string {
	t.Helper()
	var url string
	waitFor(t, "a URL matching "+re.String()+" in the relay's log", 30*time.Second, func() bool {
		m := re.FindStringSubmatch(stderr())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	return url
}

// startRelayLogged is startRelay with the relay's stderr readable while it
// runs, through *stderr.
func startRelayLogged(t *testing.T, stderr *func() string, env []string, args ...string) (stop func() result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := cliCommand(ctx, env, append([]string{"relay"}, args...)...)
	var out, errb lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("start relay: %v", err)
	}
	*stderr = errb.String
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cmd.Process.Kill()
			<-done
		}
	})
	return func() result {
		t.Helper()
		stopped = true
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("SIGTERM: %v", err)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("relay did not stop within 30s of SIGTERM\nstderr:\n%s", errb.String())
		}
		return result{stdout: out.String(), stderr: errb.String(), code: cmd.ProcessState.ExitCode()}
	}
}

func TestRelayMetricsAddrErrors(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })
	sqlite := "sqlite:" + t.TempDir() + "/outbox.db"
	relay := []string{"relay", "--db", sqlite, "--broker", "discard:"}
	for _, c := range []struct {
		name string
		env  []string
		args []string
		code int
		want []string
	}{
		{"no port", nil, append(relay, "--metrics-addr", "localhost"), 2,
			[]string{`--metrics-addr "localhost"`, "missing port", "use HOST:PORT or :PORT"}},
		{"no port, from the environment", []string{"OUTBOX_METRICS_ADDR=9090"}, relay, 2,
			[]string{`--metrics-addr "9090"`, "use HOST:PORT or :PORT"}},
		{"port taken", nil, append(relay, "--metrics-addr", taken.Addr().String()), 1,
			[]string{"--metrics-addr " + taken.Addr().String(), "cannot listen", "address already in use"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			checkError(t, runCLI(t, c.env, c.args...), c.code, c.want...)
		})
	}
}

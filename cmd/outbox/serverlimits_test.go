package main

import (
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/clitest"
	"github.com/outbox-go/outbox/cmd/outbox/internal/relaycmd"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// startRelayPID starts "outbox relay" with args and returns its process id
// and its stderr so far; the relay is killed when the test ends.
func startRelayPID(t *testing.T, args ...string) (pid int, stderr func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := cliCommand(ctx, nil, append([]string{"relay"}, args...)...)
	var errb lockedBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start relay: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		cancel()
	})
	return cmd.Process.Pid, errb.String
}

// openFDs counts the open file descriptors of process pid.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("count the relay's descriptors: %v", err)
	}
	return len(fds)
}

// dialIdle opens n connections to the host of url that send nothing.
func dialIdle(t *testing.T, url string, n int) []net.Conn {
	t.Helper()
	addr := strings.TrimPrefix(url, "http://")
	addr = addr[:strings.IndexByte(addr, '/')]
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	return conns
}

// TestRelayServersCapConnections: clients that open many connections to
// the metrics and admin servers and send nothing cannot raise the relay's
// open descriptors by more than relaycmd.HTTPMaxConns per server, and each of them
// is cut off after relaycmd.HTTPReadHeaderTimeout; once they are gone, both servers
// answer again.
func TestRelayServersCapConnections(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + t.TempDir() + "/outbox.db"
	mustRun(t, "migrate", "--db", dsn)
	pid, stderr := startRelayPID(t, "--db", dsn, "--broker", "discard:", "--metrics-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	metrics := urlInLog(t, stderr, metricsURL)
	adminBase := urlInLog(t, stderr, adminURL)
	clitest.Scrape(t, metrics)
	clitest.Scrape(t, adminBase+"/stats")
	base := openFDs(t, pid)

	const idle = 100
	held := append(dialIdle(t, metrics, idle), dialIdle(t, adminBase+"/", idle)...)
	// Give the servers time to accept all they will.
	time.Sleep(time.Second)
	if got, limit := openFDs(t, pid), base+2*relaycmd.HTTPMaxConns+2; got > limit {
		t.Fatalf("%d idle connections to each server raised the relay's descriptors from %d to %d; want at most %d",
			idle, base, got, limit)
	}

	// A connection that sends nothing is closed by the server.
	start := time.Now()
	held[0].SetReadDeadline(time.Now().Add(relaycmd.HTTPReadHeaderTimeout + 5*time.Second))
	if _, err := io.ReadAll(held[0]); os.IsTimeout(err) {
		t.Fatalf("an idle connection was not closed by the server within %s: %v", time.Since(start), err)
	}
	for _, c := range held {
		c.Close()
	}
	waitFor(t, "the servers to answer again", 3*relaycmd.HTTPReadHeaderTimeout, func() bool {
		clitest.Scrape(t, metrics)
		clitest.Scrape(t, adminBase+"/stats")
		return true
	})
	waitFor(t, "the descriptors of the closed connections to be released", 10*time.Second, func() bool {
		return openFDs(t, pid) <= base+2
	})
}

// TestRelayServersCutSlowLoris: a client that sends a request's headers a
// byte at a time is cut off once relaycmd.HTTPReadHeaderTimeout has passed since
// its first byte, however steadily it sends.
func TestRelayServersCutSlowLoris(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + t.TempDir() + "/outbox.db"
	mustRun(t, "migrate", "--db", dsn)
	_, stderr := startRelayPID(t, "--db", dsn, "--broker", "discard:", "--metrics-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	for _, url := range []string{urlInLog(t, stderr, metricsURL), urlInLog(t, stderr, adminURL) + "/stats"} {
		t.Run(strings.TrimPrefix(url, "http://"), func(t *testing.T) {
			t.Parallel()
			c := dialIdle(t, url, 1)[0]
			closed := make(chan time.Duration, 1)
			start := time.Now()
			go func() {
				io.Copy(io.Discard, c)
				closed <- time.Since(start)
			}()
			if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: relay\r\n"); err != nil {
				t.Fatal(err)
			}
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			deadline := time.After(relaycmd.HTTPReadHeaderTimeout + 5*time.Second)
			for {
				select {
				case d := <-closed:
					if d < relaycmd.HTTPReadHeaderTimeout-time.Second {
						t.Fatalf("cut off after %s, before the header timeout of %s", d, relaycmd.HTTPReadHeaderTimeout)
					}
					return
				case <-tick.C:
					// Writes may succeed until the client sees the close.
					c.Write([]byte("X"))
				case <-deadline:
					t.Fatalf("a client sending its headers a byte at a time was still connected after %s", time.Since(start))
				}
			}
		})
	}
}

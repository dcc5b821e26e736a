package outboxnats

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// sharedURL is the NATS server with JetStream that the machine runs; tests
// that do not stop the broker use it. OUTBOX_NATS_URL overrides it.
func sharedURL() string {
	if u := os.Getenv("OUTBOX_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// natsServerBin is the nats-server binary for private instances.
func natsServerBin() string {
	if b := os.Getenv("OUTBOX_NATS_SERVER"); b != "" {
		return b
	}
	return "/usr/sbin/nats-server"
}

// requireShared fails the test when the shared server is not there, with a
// message that says what to start.
func requireShared(t testing.TB) {
	t.Helper()
	nc, err := nats.Connect(sharedURL(), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatalf("the NATS server at %s is not reachable (%v): start nats-server with JetStream (-js) there, or set OUTBOX_NATS_URL", sharedURL(), err)
	}
	nc.Close()
}

// privateServer is a nats-server child process of the test, with its own
// port and JetStream store, that a test may stop and start again.
type privateServer struct {
	t    testing.TB
	port int
	dir  string
	args []string // extra command-line arguments
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startPrivateServer starts a nats-server with JetStream on a free port,
// storing in a temporary directory, and stops it when the test ends.
func startPrivateServer(t testing.TB, args ...string) *privateServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &privateServer{t: t, port: port, dir: t.TempDir(), args: args}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's nats:// URL.
func (s *privateServer) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// Start starts the server (again, on the same port and store) and waits
// until it accepts connections with JetStream ready.
func (s *privateServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command(natsServerBin(), append([]string{"-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", s.dir}, s.args...)...)
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", natsServerBin(), err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := nats.Connect(s.URL(), nats.Timeout(time.Second))
		if err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization") {
			return // up, and asking for credentials
		}
		if err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = js.AccountInfo(ctx)
			cancel()
			nc.Close()
			if err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("private nats-server on port %d did not come up: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server and waits for it to exit.
func (s *privateServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart stops the server and starts it again on the same port and store.
func (s *privateServer) Restart() {
	s.Stop()
	s.Start()
}

// uniqueID returns a short random name part for streams and subjects.
func uniqueID() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// testURL returns serverURL with a stream, subjects and dead-letter path of
// their own, and a function that deletes both streams.
func testURL(t testing.TB, serverURL string) (u, id string) {
	t.Helper()
	id = uniqueID()
	u = fmt.Sprintf("%s?subject=%s.{topic}&stream=S_%s&dead=%sdead.{group}&dead_stream=S_%s_DEAD", serverURL, id, id, id, id)
	t.Cleanup(func() {
		nc, err := nats.Connect(serverURL, nats.Timeout(time.Second))
		if err != nil {
			return
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, "S_"+id)
		_ = js.DeleteStream(ctx, "S_"+id+"_DEAD")
	})
	return u, id
}

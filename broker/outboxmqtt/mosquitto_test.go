package outboxmqtt

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// sharedURL is the mosquitto service of this machine. Tests never stop or
// reconfigure it; the ones that restart a broker start a private one.
const sharedURL = "mqtt://127.0.0.1:1883"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// requireBroker fails the test at once when nothing listens at addr.
func requireBroker(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("no MQTT broker at %s (%v): start mosquitto (`service mosquitto start`) before running these tests", addr, err)
	}
	_ = c.Close()
}

// mosquitto is a private broker in a temporary directory, on a port of its
// own, with persistence, so that a test can stop and restart it.
type mosquitto struct {
	t    testing.TB
	dir  string
	port int

	mu  sync.Mutex
	cmd *exec.Cmd
}

// startMosquitto starts a private broker; extra is appended to its config.
// It is stopped at the end of the test.
func startMosquitto(t testing.TB, extra string) *mosquitto {
	t.Helper()
	m := &mosquitto{t: t, dir: t.TempDir(), port: freePort(t)}
	// user root: started as root, mosquitto switches to the mosquitto user,
	// which cannot write the test's temporary directory, and then loses its
	// persistence file on the restart (the setting does nothing for others).
	if !strings.Contains(extra, "allow_anonymous") {
		extra += "\nallow_anonymous true"
	}
	conf := fmt.Sprintf("listener %d 127.0.0.1\nuser root\npersistence true\npersistence_location %s/\nset_tcp_nodelay true\nlog_dest file %s\n%s\n",
		m.port, m.dir, filepath.Join(m.dir, "mosquitto.log"), extra)
	if err := os.WriteFile(filepath.Join(m.dir, "m.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	m.Start()
	t.Cleanup(m.Stop)
	return m
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (m *mosquitto) Addr() string { return "127.0.0.1:" + strconv.Itoa(m.port) }
func (m *mosquitto) URL() string  { return "mqtt://" + m.Addr() }

// Start starts the broker and waits until it accepts connections.
func (m *mosquitto) Start() {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	bin := "mosquitto"
	if _, err := exec.LookPath(bin); err != nil {
		bin = "/usr/sbin/mosquitto"
	}
	cmd := exec.Command(bin, "-c", filepath.Join(m.dir, "m.conf"))
	if err := cmd.Start(); err != nil {
		m.t.Fatalf("starting mosquitto: %v", err)
	}
	m.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", m.Addr(), time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(m.dir, "mosquitto.log"))
			m.t.Fatalf("private mosquitto on %s did not start: %v\n%s", m.Addr(), err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the broker with SIGTERM, so that it saves its persistence file,
// and waits for it to exit. Stopping a stopped broker does nothing.
func (m *mosquitto) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-done
	}
	m.cmd = nil
}

// Restart stops the broker and starts it again on the same port and data.
func (m *mosquitto) Restart() {
	m.Stop()
	m.Start()
}

// testCtx is a context bounded by d, canceled at the end of the test.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

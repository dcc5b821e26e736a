package testbroker

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is a broker process of one test.
type Server struct {
	Port int
	Dir  string
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// Addr is "127.0.0.1:<Port>".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// FreePort returns a TCP port nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Spec is how to start one broker process.
type Spec struct {
	Name string   // binary name, for messages and PATH look-up
	Args []string // command line
	Env  []string // added to the environment
	Port int      // the port it listens on; Start waits for it
	Dir  string   // its folder (a t.TempDir)
	Log  string   // its log file in Dir, shown when it does not come up
	Wait time.Duration
}

// Start runs spec, waits until its port accepts connections and stops it
// (SIGTERM, then SIGKILL) when the test ends. A missing binary fails the
// test: the tests need the real broker.
func Start(t testing.TB, spec Spec) *Server {
	t.Helper()
	cmd := exec.Command(spec.Name, spec.Args...)
	cmd.Dir = spec.Dir
	cmd.Env = append(os.Environ(), spec.Env...)
	out, err := os.Create(filepath.Join(spec.Dir, "stdout.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		t.Fatalf("this test needs %s on PATH (.ci/run installs it): %v", spec.Name, err)
	}
	s := &Server{Port: spec.Port, Dir: spec.Dir, name: spec.Name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = out.Close(); close(s.done) }()
	t.Cleanup(s.Stop)
	wait := spec.Wait
	if wait == 0 {
		wait = 15 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err == nil {
			_ = c.Close()
			return s
		}
		select {
		case <-s.done:
			t.Fatalf("%s exited before listening on %d:\n%s", spec.Name, spec.Port, s.logs(spec.Log))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %d within %s:\n%s", spec.Name, spec.Port, wait, s.logs(spec.Log))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (s *Server) logs(name string) string {
	var b strings.Builder
	for _, n := range []string{"stdout.log", name} {
		if n == "" {
			continue
		}
		data, _ := os.ReadFile(filepath.Join(s.Dir, n))
		fmt.Fprintf(&b, "--- %s\n%s\n", n, data)
	}
	return b.String()
}

// Stop ends the process and waits for it.
func (s *Server) Stop() {
	if s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// WriteFile writes a configuration file into dir and returns its path.
func WriteFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil { //nolint:gosec // a broker running as another user reads it
		t.Fatal(err)
	}
	return path
}

package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// privateSpec describes a broker the end-to-end tests run as a child process
// on a port and directory of their own, so that Restart can stop and start
// it without touching the machine's shared broker.
type privateSpec struct {
	name string // for messages, e.g. "redis-server"
	env  string // variable that overrides the binary's path
	bin  string // default binary
	// args returns the command line for the port and directory.
	args func(port int, dir string) []string
	// setup, when set, prepares the directory (a configuration file).
	setup func(t *testing.T, port int, dir string)
	// ready, when set, says whether the server answers; by default a TCP
	// connection is enough.
	ready func(port int) error
	// wait bounds the wait for it to answer. Defaults to 10s.
	wait time.Duration
	// log names the server's log file in its directory, shown on failure.
	log string
	// term stops it with SIGTERM, on which it saves its data; otherwise it
	// is killed, as in a crash.
	term bool
}

// privateServer is a running privateSpec.
type privateServer struct {
	spec privateSpec
	port int
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func startPrivate(t *testing.T, spec privateSpec) *privateServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &privateServer{spec: spec, port: port, dir: t.TempDir()}
	if spec.setup != nil {
		spec.setup(t, port, s.dir)
	}
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

func (s *privateServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

func (s *privateServer) start(t *testing.T) {
	t.Helper()
	bin := os.Getenv(s.spec.env)
	if bin == "" {
		bin = s.spec.bin
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(bin, s.spec.args(s.port, s.dir)...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("the end-to-end test needs %s (set %s to its path): %v", s.spec.name, s.spec.env, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	ready := s.spec.ready
	if ready == nil {
		ready = func(port int) error {
			c, err := net.DialTimeout("tcp", s.addr(), time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}
	}
	wait := s.spec.wait
	if wait == 0 {
		wait = 10 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		err := ready(s.port)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			var log []byte
			if s.spec.log != "" {
				log, _ = os.ReadFile(filepath.Join(s.dir, s.spec.log))
			}
			t.Fatalf("%s on port %d did not come up: %v\n%s", s.spec.name, s.port, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *privateServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	if s.spec.term {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	} else {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

func (s *privateServer) restart(t *testing.T) {
	t.Helper()
	s.stop()
	s.start(t)
}

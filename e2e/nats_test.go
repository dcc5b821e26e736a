package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxnats"
	"github.com/outbox-go/outbox/brokertest"
)

// TestNATS runs the scenario through NATS JetStream on a private nats-server
// (its own port and store directory), which Restart kills and starts again.
func TestNATS(t *testing.T) {
	srv := startNATSServer(t)
	// The duplicate window is kept short on purpose: the harness checks that
	// the inbox discards duplicate deliveries, and with the default of two
	// minutes JetStream itself would drop every copy the scenario publishes
	// again. Copies published within the window are still dropped by the
	// stream; those published after it reach the inbox.
	url := srv.url() + "?stream=E2E&subject=e2e.{topic}&dead=e2edead.{group}&dead_stream=E2E_DEAD&duplicates=100ms&ack_wait=5s&timeout=2s"
	Run(t, Broker{
		Name:  "nats",
		Topic: "transfer.done",
		NewPublisher: func(t *testing.T) outbox.Publisher {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := outboxnats.NewPublisher(ctx, outboxnats.PublisherConfig{URL: url})
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			return p
		},
		NewSubscriber: func(t *testing.T, group string) brokertest.Subscriber {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := outboxnats.NewSubscriber(ctx, outboxnats.SubscriberConfig{
				URL: url, Group: group, Topic: "transfer.done", RedeliveryDelay: 100 * time.Millisecond,
			})
			if err != nil {
				t.Fatalf("NewSubscriber: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		Restart: func(t *testing.T) { srv.restart(t) },
	})
}

// natsServer is a nats-server child process with JetStream.
type natsServer struct {
	port int
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func startNATSServer(t *testing.T) *natsServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &natsServer{port: port, dir: t.TempDir()}
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

func (s *natsServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

func (s *natsServer) start(t *testing.T) {
	t.Helper()
	bin := os.Getenv("OUTBOX_NATS_SERVER")
	if bin == "" {
		bin = "/usr/sbin/nats-server"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-js", "-sd", s.dir)
	if err := cmd.Start(); err != nil {
		t.Fatalf("the end-to-end test needs nats-server (set OUTBOX_NATS_SERVER to its path): %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server on port %d did not come up: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *natsServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

func (s *natsServer) restart(t *testing.T) {
	s.stop()
	s.start(t)
}

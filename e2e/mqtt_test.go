package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxmqtt"
	"github.com/outbox-go/outbox/brokertest"
)

// TestMQTT runs the scenario through MQTT 5 on a private mosquitto (its own
// port and persistence directory), which Restart stops with SIGTERM (so that
// it saves its sessions) and starts again.
func TestMQTT(t *testing.T) {
	srv := startMosquitto(t)
	url := srv.url() + "?topic=e2e/{topic}"
	Run(t, Broker{
		Name:  "mqtt",
		Topic: "transfer.done",
		NewPublisher: func(t *testing.T) outbox.Publisher {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := outboxmqtt.NewPublisher(ctx, outboxmqtt.PublisherConfig{URL: url})
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			return p
		},
		NewSubscriber: func(t *testing.T, group string) brokertest.Subscriber {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := outboxmqtt.NewSubscriber(ctx, outboxmqtt.SubscriberConfig{
				URL: url, Group: group, Name: "member-1", Topic: "transfer.done",
				RedeliveryDelay: 100 * time.Millisecond, SessionExpiry: 10 * time.Minute,
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

// mosquittoServer is a mosquitto child process with persistence.
type mosquittoServer struct {
	port int
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func startMosquitto(t *testing.T) *mosquittoServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &mosquittoServer{port: port, dir: t.TempDir()}
	// user root: started as root, mosquitto switches to the mosquitto user,
	// which cannot write the test's temporary directory, and then loses its
	// persistence file on the restart (the setting does nothing for others).
	// max_queued_messages 0: mosquitto otherwise drops, after acking them,
	// the messages of a subscriber more than 1000 behind (see the
	// outboxmqtt package documentation).
	conf := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\nuser root\npersistence true\npersistence_location %s/\nset_tcp_nodelay true\nmax_queued_messages 0\nlog_dest file %s\n",
		port, s.dir, filepath.Join(s.dir, "mosquitto.log"))
	if err := os.WriteFile(filepath.Join(s.dir, "m.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

func (s *mosquittoServer) url() string { return "mqtt://127.0.0.1:" + strconv.Itoa(s.port) }

func (s *mosquittoServer) start(t *testing.T) {
	t.Helper()
	bin := os.Getenv("OUTBOX_MOSQUITTO")
	if bin == "" {
		bin = "/usr/sbin/mosquitto"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(bin, "-c", filepath.Join(s.dir, "m.conf"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("the end-to-end test needs mosquitto (set OUTBOX_MOSQUITTO to its path): %v", err)
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
			log, _ := os.ReadFile(filepath.Join(s.dir, "mosquitto.log"))
			t.Fatalf("mosquitto on port %d did not come up: %v\n%s", s.port, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM, on which mosquitto writes its persistence file (the
// sessions, subscriptions and queued messages) before it exits.
func (s *mosquittoServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

func (s *mosquittoServer) restart(t *testing.T) {
	s.stop()
	s.start(t)
}

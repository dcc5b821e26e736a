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
	"github.com/outbox-go/outbox/broker/outboxredis"
	"github.com/outbox-go/outbox/brokertest"
)

// TestRedis runs the scenario through Redis Streams on a private
// redis-server (its own port and directory, append-only file fsynced on
// every write, so that what it acknowledged survives Restart).
func TestRedis(t *testing.T) {
	srv := startRedis(t)
	url := srv.url() + "?stream=e2e:{topic}&minidle=200ms"
	const topic = "transfer.done"
	Run(t, Broker{
		Name:  "redis",
		Topic: topic,
		NewPublisher: func(t *testing.T) outbox.Publisher {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := outboxredis.NewPublisher(ctx, outboxredis.PublisherConfig{URL: url})
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			return p
		},
		NewSubscriber: func(t *testing.T, group string) brokertest.Subscriber {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := outboxredis.NewSubscriber(ctx, outboxredis.SubscriberConfig{URL: url, Group: group, Topic: topic})
			if err != nil {
				t.Fatalf("NewSubscriber: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		Restart: func(t *testing.T) { srv.restart(t) },
	})
}

// redisServer is a redis-server child process with an append-only file.
type redisServer struct {
	port int
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &redisServer{port: port, dir: t.TempDir()}
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

func (s *redisServer) url() string { return "redis://127.0.0.1:" + strconv.Itoa(s.port) + "/0" }

func (s *redisServer) start(t *testing.T) {
	t.Helper()
	bin := os.Getenv("OUTBOX_REDIS_SERVER")
	if bin == "" {
		bin = "redis-server"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--logfile", filepath.Join(s.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("the end-to-end test needs redis-server (set OUTBOX_REDIS_SERVER to its path): %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err := redisPing(s.port); err == nil {
			return
		} else if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			t.Fatalf("redis-server on port %d did not come up: %v\n%s", s.port, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// redisPing sends PING in the inline protocol and expects +PONG: the
// server is up and has loaded its data (it answers LOADING until then).
func redisPing(port int) error {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", buf[:n])
	}
	return nil
}

// stop shuts the server down with SIGTERM (it flushes the append-only file
// and exits) and waits for it.
func (s *redisServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

func (s *redisServer) restart(t *testing.T) {
	t.Helper()
	s.stop()
	s.start(t)
}

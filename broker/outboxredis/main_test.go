package outboxredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// sharedURL is the Redis service on this machine that the tests share; a
// test that stops Redis starts a private one instead (startServer).
const sharedURL = "redis://127.0.0.1:6379/0"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sharedClient returns a client of the shared Redis, failing the test when
// it does not answer.
func sharedClient(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(sharedURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("the shared Redis at %s does not answer (start it: redis-server on 127.0.0.1:6379): %v", sharedURL, err)
	}
	return rdb
}

// uniquePrefix returns a key prefix no other test uses, and deletes the
// keys under it when the test ends.
func uniquePrefix(t testing.TB, rdb *redis.Client) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	prefix := "outboxredis-test:" + name + ":" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			_ = rdb.Del(ctx, keys...).Err()
		}
	})
	return prefix
}

// server is a private redis-server, a child process of the test, with an
// append-only file fsynced on every write in a directory of the test's own,
// so that what it acknowledged survives Restart.
type server struct {
	t    testing.TB
	port int
	dir  string
	cmd  *exec.Cmd
}

func startServer(t testing.TB) *server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &server{t: t, port: port, dir: t.TempDir()}
	s.start()
	t.Cleanup(s.stop)
	return s
}

// URL returns the server's URL with the query appended (e.g. "?stream=x").
func (s *server) URL(query string) string {
	return fmt.Sprintf("redis://127.0.0.1:%d/0%s", s.port, query)
}

func (s *server) start() {
	s.t.Helper()
	cmd := exec.Command("redis-server",
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--logfile", filepath.Join(s.dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting a private redis-server: %v", err)
	}
	s.cmd = cmd
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port), MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("private redis-server on port %d did not answer: %v\n%s", s.port, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop shuts the server down (SIGTERM: it flushes its append-only file and
// exits) and waits for it.
func (s *server) stop() {
	if s.cmd == nil {
		return
	}
	cmd := s.cmd
	s.cmd = nil
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// restart stops the server and starts it again on the same port and data.
func (s *server) restart() {
	s.t.Helper()
	s.stop()
	s.start()
}

package testbroker

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisCluster starts a Redis Cluster of three masters (no replicas) made
// of private redis-server processes, and waits until it serves every slot.
// It returns the masters' addresses.
func RedisCluster(t testing.TB) []string {
	t.Helper()
	var addrs []string
	for range 3 {
		dir := t.TempDir()
		s := Redis(t, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "5000")
		addrs = append(addrs, s.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	out, err := exec.Command("redis-cli", append(args, "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	host, port, _ := strings.Cut(addrs[0], ":")
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := exec.Command("redis-cli", "-h", host, "-p", port, "cluster", "info").Output()
		if bytes.Contains(out, []byte("cluster_state:ok")) {
			return addrs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the private Redis Cluster did not reach cluster_state:ok:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// RedisSentinel starts a private master and a Redis Sentinel that monitors
// it under the name master, and returns the sentinel's address and the
// master's server.
func RedisSentinel(t testing.TB, master string) (sentinel string, primary *Server) {
	t.Helper()
	primary = Redis(t)
	dir, port := t.TempDir(), FreePort(t)
	conf := WriteFile(t, dir, "sentinel.conf", fmt.Sprintf(
		"port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 5000\n",
		port, dir, master, primary.Port, master))
	s := Start(t, Spec{Name: "redis-server", Args: []string{conf, "--sentinel"}, Port: port, Dir: dir})
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := exec.Command("redis-cli", "-p", strconv.Itoa(port), "sentinel", "get-master-addr-by-name", master).Output()
		if bytes.Contains(out, []byte(strconv.Itoa(primary.Port))) {
			return s.Addr(), primary
		}
		if time.Now().After(deadline) {
			t.Fatalf("the private Redis Sentinel does not know master %s:\n%s", master, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

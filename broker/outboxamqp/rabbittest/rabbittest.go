// Package rabbittest runs a private RabbitMQ node for tests that must stop
// and start a broker (a restart test) without touching the machine's shared
// one. It starts the rabbitmq-server of the RabbitMQ installation on this
// machine as a child process, with its own node name, ports, data and
// configuration in a temporary directory.
package rabbittest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Server is the script that starts a node. Debian's /usr/sbin/rabbitmq-server
// switches to the rabbitmq user; this one runs as the caller.
var Server = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// StartTimeout bounds one start of the node: about 20s for the first start
// on two cores, 10s for a restart.
var StartTimeout = 3 * time.Minute

// Node is a private RabbitMQ node.
type Node struct {
	// URL is the node's AMQP URL, amqp://guest:guest@127.0.0.1:<port>/.
	URL string
	// Port is the AMQP port.
	Port int

	// tls, when set, is how the readiness check connects (a TLS-only node).
	tls  *tls.Config
	dir  string
	name string
	dist int
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// Start starts a node in t.TempDir() and stops it at the end of the test.
func Start(t testing.TB) *Node {
	t.Helper()
	return start(t, nil, func(port int) string {
		return fmt.Sprintf("listeners.tcp.local = 127.0.0.1:%d\nloopback_users = none\n", port)
	})
}

// StartTLS starts a node whose only listener takes AMQP over TLS (its URL
// is amqps://), with the server certificate and key given, that requires a
// client certificate signed by the CA. client is how the readiness check
// connects.
func StartTLS(t testing.TB, caFile, certFile, keyFile string, client *tls.Config) *Node {
	t.Helper()
	n := start(t, client, func(port int) string {
		return fmt.Sprintf("listeners.tcp = none\nlisteners.ssl.default = 127.0.0.1:%d\nloopback_users = none\n"+
			"ssl_options.cacertfile = %s\nssl_options.certfile = %s\nssl_options.keyfile = %s\n"+
			"ssl_options.verify = verify_peer\nssl_options.fail_if_no_peer_cert = true\n", port, caFile, certFile, keyFile)
	})
	return n
}

func start(t testing.TB, client *tls.Config, config func(port int) string) *Node {
	t.Helper()
	if _, err := os.Stat(Server); err != nil {
		t.Fatalf("rabbittest: RabbitMQ is not installed here (%v): install the rabbitmq-server package", err)
	}
	dir := t.TempDir()
	n := &Node{
		dir:  dir,
		name: fmt.Sprintf("outboxtest%d@localhost", rand.Uint32()),
		Port: freePort(t),
		dist: freePort(t),
		tls:  client,
	}
	n.URL = fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.Port)
	if client != nil {
		n.URL = fmt.Sprintf("amqps://guest:guest@127.0.0.1:%d/", n.Port)
	}
	conf := config(n.Port)
	for name, body := range map[string]string{
		"rabbitmq.conf":     conf,
		"rabbitmq-env.conf": "",
		"enabled_plugins":   "[].\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { n.kill() })
	n.Start(t)
	return n
}

// freePort returns a TCP port nobody listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start starts the node (again) and waits until it accepts AMQP connections.
func (n *Node) Start(t testing.TB) {
	t.Helper()
	if n.cmd != nil {
		t.Fatal("rabbittest: Start on a running node")
	}
	log, err := os.OpenFile(filepath.Join(n.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	// The node outlives any one context: Stop and the clean-up end it.
	cmd := exec.CommandContext(context.Background(), Server)
	cmd.Dir = n.dir
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that a signal reaches the script and the
	// Erlang VM it starts; and SIGTERM when the test process dies without
	// its clean-up (a test timeout panics), which the script turns into a
	// graceful stop of the VM.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Env = append(os.Environ(),
		"HOME="+n.dir, // the Erlang cookie
		"RABBITMQ_NODENAME="+n.name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.Port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(n.dist),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(n.dir, "rabbitmq.conf"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(n.dir, "rabbitmq-env.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(n.dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(n.dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.dir, "log"),
		"RABBITMQ_LOGS=-",
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("rabbittest: start %s: %v", Server, err)
	}
	n.cmd, n.log, n.done = cmd, log, make(chan struct{})
	go func(done chan struct{}) {
		cmd.Wait()
		close(done)
	}(n.done)

	start := time.Now()
	for {
		select {
		case <-n.done:
			n.cmd = nil
			log.Close()
			t.Fatalf("rabbittest: the node exited while starting; its log ends:\n%s", n.tail())
		default:
		}
		if c, err := amqp.DialConfig(n.URL, amqp.Config{Dial: amqp.DefaultDial(time.Second), TLSClientConfig: n.tls}); err == nil {
			c.Close()
			t.Logf("rabbittest: node %s up on port %d after %s", n.name, n.Port, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > StartTimeout {
			t.Fatalf("rabbittest: the node did not accept connections within %s; its log ends:\n%s", StartTimeout, n.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stop stops the node gracefully (SIGTERM), as a broker restart would.
func (n *Node) Stop(t testing.TB) {
	t.Helper()
	if n.cmd == nil {
		return
	}
	start := time.Now()
	if err := n.signal(syscall.SIGTERM); err != nil {
		t.Logf("rabbittest: SIGTERM: %v", err)
	}
	n.waitGone(30 * time.Second)
	t.Logf("rabbittest: node %s stopped after %s", n.name, time.Since(start).Round(time.Millisecond))
}

// Ctl is the path of rabbitmqctl (Debian's package puts it here).
var Ctl = "/usr/lib/rabbitmq/bin/rabbitmqctl"

// Ctl runs rabbitmqctl against the node with args (e.g.
// "set_vm_memory_high_watermark", "0.0001" to raise a memory alarm) and
// returns its output.
func (n *Node) Ctl(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(context.Background(), Ctl, append([]string{"-n", n.name}, args...)...) //nolint:gosec // a test helper: the tests choose args
	cmd.Env = append(os.Environ(), "HOME="+n.dir, "ERL_EPMD_ADDRESS=127.0.0.1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rabbittest: rabbitmqctl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// Restart stops the node and starts it again on the same port and data.
func (n *Node) Restart(t testing.TB) {
	t.Helper()
	n.Stop(t)
	n.Start(t)
}

// Wait blocks until ctx ends or the node accepts connections again.
func (n *Node) Wait(ctx context.Context) error {
	for {
		if c, err := amqp.DialConfig(n.URL, amqp.Config{Dial: amqp.DefaultDial(time.Second), TLSClientConfig: n.tls}); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *Node) kill() {
	if n.cmd == nil {
		return
	}
	n.signal(syscall.SIGTERM)
	n.waitGone(20 * time.Second)
}

// waitGone waits until every process of the node's group has exited (the
// script may exit before the Erlang VM), killing them after timeout.
func (n *Node) waitGone(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Kill(-n.cmd.Process.Pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			break
		}
		if time.Now().After(deadline) {
			n.signal(syscall.SIGKILL)
			deadline = time.Now().Add(time.Hour)
		}
		time.Sleep(50 * time.Millisecond)
	}
	<-n.done
	n.cmd = nil
	n.log.Close()
}

// signal signals the node's whole process group: the script and the Erlang
// VM it starts.
func (n *Node) signal(sig syscall.Signal) error {
	err := syscall.Kill(-n.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

func (n *Node) tail() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "server.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(bytes.TrimSpace(b))
}

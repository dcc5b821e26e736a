package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// e2eDir holds the console's browser tests (node --test, playwright-core).
const e2eDir = "../../console/e2e"

var consoleURL = regexp.MustCompile(`msg="serving the console" url=(http://\S+)/`)

// startConsole runs `outbox console` with args and returns its URL; the
// server is stopped with SIGTERM when t ends, and must exit 0.
func startConsole(t *testing.T, env []string, args ...string) (url string, log func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	cmd := cliCommand(ctx, env, append([]string{"console"}, args...)...)
	var errb lockedBuffer
	cmd.Stdout, cmd.Stderr = &errb, &errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("start outbox console: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("outbox console after SIGTERM: %v\n%s", err, errb.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Errorf("outbox console did not stop within 20s of SIGTERM")
		}
	})
	return urlInLog(t, errb.String, consoleURL), errb.String
}

// seedConsole writes the browser tests' rows: 60 DEAD messages in three
// failure groups and 5 NEW ones.
func seedConsole(t *testing.T, b *backend) {
	t.Helper()
	for i := range 60 {
		topic, msgID, key := "order.paid", fmt.Sprintf("order-%d:OrderPaid", i), fmt.Sprintf("cust-%d", i%7)
		var lastErr string
		switch {
		case i < 40:
			lastErr = fmt.Sprintf("publish %s: nats: timeout after %dms", msgID, 5000+i)
		case i < 55:
			topic, msgID = "invoice.sent", fmt.Sprintf("invoice-%d", i)
			lastErr = "webhook answered 422: invalid schema for customer " + key
		default:
			topic, msgID = "user.deleted", fmt.Sprintf("user-%d", i)
			lastErr = "amqp: NOT_FOUND - no exchange 'users'"
		}
		b.exec(t, "INSERT INTO outbox (msg_id, topic, msg_key, payload, headers) VALUES (?, ?, ?, ?, ?)", msgID, topic, key,
			fmt.Sprintf(`{"order": %d, "amount": {"currency": "EUR", "value": %d}}`, i, 1000+i*35),
			`{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "content-type": "application/json"}`)
		// The trigger of PostgreSQL's schema gives the row its dead_at.
		b.exec(t, "UPDATE outbox SET status = 2, retries = 10, last_error = ? WHERE msg_id = ?", lastErr, msgID)
	}
	for i := range 5 {
		b.insert(t, fmt.Sprintf("pending-%d", i), "order.paid", `{}`)
	}
}

// TestConsoleBrowser runs the console's browser tests (console/e2e) in
// headless Chromium against two `outbox console` servers on a seeded
// PostgreSQL schema: one writable, one read-only. CONSOLE_SCREENSHOT=path
// also writes a screenshot there.
func TestConsoleBrowser(t *testing.T) {
	t.Parallel()
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("the console's browser tests need Chromium at %s: apt-get install -y chromium (or set CHROMIUM): %v", chromium, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("the console's browser tests need node: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e2eDir, "node_modules", "playwright-core")); err != nil {
		t.Fatalf("the console's browser tests need playwright-core: run 'npm ci' in console/e2e: %v", err)
	}
	b := newPostgres(t)
	mustRun(t, "migrate", "--db", b.dsn)
	seedConsole(t, b)
	const token = "e2e-console-token-0123456789"
	env := []string{"OUTBOX_ADMIN_TOKEN=" + token}
	rw, rwLog := startConsole(t, env, "--db", b.dsn, "--addr", "127.0.0.1:0", "--admin-writable", "--sample-interval", "500ms")
	ro, _ := startConsole(t, env, "--db", b.dsn, "--addr", "127.0.0.1:0", "--sample-interval", "500ms")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "console.test.js")
	cmd.Dir = e2eDir
	cmd.Env = append(os.Environ(), "CONSOLE_URL="+rw, "CONSOLE_RO_URL="+ro, "CONSOLE_TOKEN="+token, "CHROMIUM="+chromium)
	if shot := os.Getenv("CONSOLE_SCREENSHOT"); shot != "" {
		abs, err := filepath.Abs(shot)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, "CONSOLE_SCREENSHOT="+abs)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test in console/e2e: %v\n%s\n--- the writable console's log:\n%s", err, out, rwLog())
	}
	t.Logf("node --test in console/e2e:\n%s", out)

	// Every retry and drop is in the log, with who and what.
	log := rwLog()
	for _, want := range []string{
		`msg="outbox console: DEAD messages retried" who=token via=session done=1 selected=1 msg_ids=order-3:OrderPaid`,
		`msg="outbox console: DEAD messages dropped" who=token via=session done=2 selected=2 msg_ids=order-0:OrderPaid,order-1:OrderPaid`,
		`msg="outbox console: DEAD messages retried" who=token via=session done=5 selected=5`,
		`filter="{\"topic\":\"user.deleted\"}"`,
		`group="webhook answered #: invalid schema for customer …"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the console's log lacks %s:\n%s", want, log)
		}
	}
	if strings.Contains(log, token) {
		t.Errorf("the console's log shows the token:\n%s", log)
	}
	if n := b.count(t, "status = 2"); n != 60-1-2-5-15 {
		t.Errorf("%d DEAD rows left, want %d", n, 60-1-2-5-15)
	}
}

package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/cmd/outbox/internal/clitest"
)

// The tests run the real binary, built once, against the real databases of
// this machine. Each test gets its own PostgreSQL schema, MariaDB database or
// SQLite file (package clitest). A database that cannot be reached fails the
// test: nothing skips.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outbox-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "outbox")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building the outbox binary: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is what one run of the binary did.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// cliCommand returns the binary ready to run with args and, on top of this
// process's environment without its OUTBOX_ variables, env.
func cliCommand(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOX_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// runCLI runs the binary to completion.
func runCLI(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := cliCommand(ctx, env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("run outbox %s: %v", strings.Join(args, " "), err)
	}
	for _, bad := range []string{"panic:", "goroutine ", ".go:"} {
		if strings.Contains(r.stderr, bad) {
			t.Errorf("outbox %s printed what looks like a stack trace:\n%s", strings.Join(args, " "), r)
		}
	}
	return r
}

// mustRun runs the binary and fails the test unless it exits 0.
func mustRun(t *testing.T, args ...string) result {
	t.Helper()
	r := runCLI(t, nil, args...)
	if r.code != 0 {
		t.Fatalf("outbox %s: %s", strings.Join(args, " "), r)
	}
	return r
}

// backend is one isolated database: the DSN the binary gets and a handle for
// the test's own SQL, which is written with '?' placeholders.
type backend struct {
	name string // "postgres", "mysql", "sqlite"
	dsn  string
	db   *sql.DB
	// daysAgo is an SQL expression for the database clock minus 10 days, in
	// the format of the dialect's timestamp columns.
	tenDaysAgo string
}

func (b *backend) rewrite(q string) string {
	if b.name != "postgres" {
		return q
	}
	var out strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&out, "$%d", n)
			continue
		}
		out.WriteRune(c)
	}
	return out.String()
}

func (b *backend) exec(t *testing.T, q string, args ...any) int64 {
	t.Helper()
	res, err := b.db.Exec(b.rewrite(q), args...)
	if err != nil {
		t.Fatalf("%s: %s: %v", b.name, q, err)
	}
	n, _ := res.RowsAffected()
	return n
}

func (b *backend) queryInt(t *testing.T, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := b.db.QueryRow(b.rewrite(q), args...).Scan(&n); err != nil {
		t.Fatalf("%s: %s: %v", b.name, q, err)
	}
	return n
}

// insert writes a message the way a sidecar would: plain SQL, defaults for
// everything but msg_id, topic and payload.
func (b *backend) insert(t *testing.T, msgID, topic, payload string) {
	t.Helper()
	b.exec(t, "INSERT INTO outbox (msg_id, topic, payload) VALUES (?, ?, ?)", msgID, topic, payload)
}

func (b *backend) status(t *testing.T, msgID string) int64 {
	t.Helper()
	return b.queryInt(t, "SELECT status FROM outbox WHERE msg_id = ?", msgID)
}

func (b *backend) count(t *testing.T, where string, args ...any) int64 {
	t.Helper()
	return b.queryInt(t, "SELECT count(*) FROM outbox WHERE "+where, args...)
}

func newPostgres(t *testing.T) *backend {
	t.Helper()
	d := clitest.NewPostgres(t)
	return &backend{name: "postgres", dsn: d.DSN, db: d.Conn, tenDaysAgo: "now() - interval '10 days'"}
}

func newMySQL(t *testing.T) *backend {
	t.Helper()
	d := clitest.NewMySQL(t)
	return &backend{name: "mysql", dsn: d.DSN, db: d.Conn, tenDaysAgo: "UTC_TIMESTAMP(6) - INTERVAL 10 DAY"}
}

func newSQLite(t *testing.T) *backend {
	t.Helper()
	d := clitest.NewSQLite(t)
	return &backend{name: "sqlite", dsn: d.DSN, db: d.Conn, tenDaysAgo: "strftime('%Y-%m-%d %H:%M:%f', 'now', '-10 days')"}
}

var backends = []struct {
	name string
	new  func(*testing.T) *backend
}{
	{"postgres", newPostgres},
	{"mysql", newMySQL},
	{"sqlite", newSQLite},
}

// eachBackend runs test in parallel subtests, one per database, each with a
// fresh database; with migrated set, the tables are created first.
func eachBackend(t *testing.T, migrated bool, test func(t *testing.T, b *backend)) {
	t.Helper()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			b := be.new(t)
			if migrated {
				mustRun(t, "migrate", "--db", b.dsn)
			}
			test(t, b)
		})
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

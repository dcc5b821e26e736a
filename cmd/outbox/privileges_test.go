package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"github.com/outbox-go/outbox/cmd/outbox/internal/clitest"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/outboxdriver"
)

// privilegeEnv is one database with three roles made by the test: a
// migrator, a writer and a relay, each with nothing but what 'outbox
// migrate --print-grants' gives it.
type privilegeEnv struct {
	dialect  string
	schema   string // the schema (PostgreSQL) or database (MySQL) of the tables
	admin    *sql.DB
	migrator string
	writer   string
	relay    string
	// dsn is the CLI's --db for a role; db a connection as that role.
	dsn func(role string) string
	db  func(t *testing.T, role string) *sql.DB
	// store opens the outbox as a role: its Store, and a function that
	// writes messages with the project's Writer in a transaction of its own.
	store func(t *testing.T, role string) (outboxdriver.Store, func(context.Context, ...outbox.Message) error)
}

func (e *privilegeEnv) tableFlags() []string {
	return []string{"--table", e.schema + ".outbox", "--inbox-table", e.schema + ".inbox"}
}

// applyScript runs each statement of a script of one-line statements.
func applyScript(t *testing.T, db *sql.DB, script string) {
	t.Helper()
	for _, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "--") {
			continue
		}
		if _, err := db.Exec(strings.TrimSuffix(line, ";")); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func newPrivilegesPostgres(t *testing.T) *privilegeEnv {
	admin := clitest.OpenOrFail(t, "pgx", clitest.PGAdminDSN, "PostgreSQL at 127.0.0.1:5432 (user postgres, trust auth, database test)")
	e := &privilegeEnv{dialect: "postgres", schema: clitest.UniqueName(), admin: admin}
	e.migrator, e.writer, e.relay = e.schema+"_migrator", e.schema+"_writer", e.schema+"_relay"
	roles := []string{e.migrator, e.writer, e.relay}
	t.Cleanup(func() {
		admin.Exec("DROP SCHEMA IF EXISTS " + e.schema + " CASCADE")
		for _, r := range roles {
			admin.Exec("DROP OWNED BY " + r)
			if _, err := admin.Exec("DROP ROLE IF EXISTS " + r); err != nil {
				t.Errorf("drop role %s: %v", r, err)
			}
		}
	})
	for _, r := range roles {
		if _, err := admin.Exec("CREATE ROLE " + r + " LOGIN"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Exec("CREATE SCHEMA " + e.schema); err != nil {
		t.Fatal(err)
	}
	e.dsn = func(role string) string { return "postgres://" + role + "@127.0.0.1:5432/test" }
	e.db = func(t *testing.T, role string) *sql.DB {
		return clitest.OpenOrFail(t, "pgx", e.dsn(role), "PostgreSQL as "+role)
	}
	e.store = func(t *testing.T, role string) (outboxdriver.Store, func(context.Context, ...outbox.Message) error) {
		pool, err := pgxpool.New(context.Background(), e.dsn(role))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		drv, err := outboxpgx.New(pool, outbox.Tables{Outbox: e.schema + ".outbox", Inbox: e.schema + ".inbox"})
		if err != nil {
			t.Fatal(err)
		}
		w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return drv, func(ctx context.Context, msgs ...outbox.Message) error {
			return drv.RunInTx(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
		}
	}
	return e
}

func newPrivilegesMySQL(t *testing.T) *privilegeEnv {
	admin := clitest.OpenOrFail(t, "mysql", clitest.MySQLAdminDSN, "MariaDB at 127.0.0.1:3306 (user root, empty password, database test)")
	name := clitest.UniqueName()
	e := &privilegeEnv{dialect: "mysql", schema: name, admin: admin}
	// Account names are at most 80 characters on MariaDB, 32 on MySQL.
	short := "ob_" + randomHex(4)
	e.migrator, e.writer, e.relay = short+"_m", short+"_w", short+"_r"
	password := map[string]string{}
	t.Cleanup(func() {
		admin.Exec("DROP DATABASE IF EXISTS " + name)
		for r := range password {
			if _, err := admin.Exec("DROP USER IF EXISTS '" + r + "'@'%'"); err != nil {
				t.Errorf("drop user %s: %v", r, err)
			}
		}
	})
	for _, r := range []string{e.migrator, e.writer, e.relay} {
		password[r] = randomHex(12)
		if _, err := admin.Exec("CREATE USER '" + r + "'@'%' IDENTIFIED BY '" + password[r] + "'"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	e.dsn = func(role string) string { return "mysql://" + role + ":" + password[role] + "@127.0.0.1:3306/" + name }
	driverDSN := func(role string) string {
		return role + ":" + password[role] + "@tcp(127.0.0.1:3306)/" + name + "?parseTime=true&loc=UTC&interpolateParams=true"
	}
	e.db = func(t *testing.T, role string) *sql.DB {
		return clitest.OpenOrFail(t, "mysql", driverDSN(role), "MariaDB as "+role)
	}
	e.store = func(t *testing.T, role string) (outboxdriver.Store, func(context.Context, ...outbox.Message) error) {
		drv, err := outboxmysql.New(e.db(t, role), outbox.Tables{Outbox: name + ".outbox", Inbox: name + ".inbox"})
		if err != nil {
			t.Fatal(err)
		}
		w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return drv, func(ctx context.Context, msgs ...outbox.Message) error {
			return drv.RunInTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) })
		}
	}
	return e
}

// TestPrivileges creates a migrator, a writer and a relay role with only
// the grants 'outbox migrate --print-grants' prints, then: the migrator
// migrates; the writer inserts (the Writer and plain SQL) and can neither
// update, delete nor read payloads; the relay relays (a retry and a DEAD
// message included), cleans up and cannot DROP or ALTER the table.
func TestPrivileges(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		env  func(*testing.T) *privilegeEnv
	}{{"postgres", newPrivilegesPostgres}, {"mysql", newPrivilegesMySQL}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := c.env(t)
			grants := append([]string{"migrate", "--print-grants", "--dialect", e.dialect}, e.tableFlags()...)
			applyScript(t, e.admin, mustRun(t, append(grants, "--migrator", e.migrator)...).stdout)
			mustRun(t, append([]string{"migrate", "--db", e.dsn(e.migrator)}, e.tableFlags()...)...)
			noCleanup := mustRun(t, append(grants, "--writer", e.writer, "--relay", e.relay)...).stdout
			if strings.Contains(noCleanup, "GRANT DELETE") {
				t.Errorf("without --cleanup the relay may delete messages:\n%s", noCleanup)
			}
			applyScript(t, e.db(t, e.migrator), mustRun(t, append(grants, "--writer", e.writer, "--relay", e.relay, "--cleanup")...).stdout)

			checkWriter(t, e)
			checkRelay(t, e)
		})
	}
}

func checkWriter(t *testing.T, e *privilegeEnv) {
	ctx := context.Background()
	_, write := e.store(t, e.writer)
	msg := func(id string) outbox.Message {
		return outbox.Message{MsgID: id, Topic: "orders", Payload: []byte(`{"secret":"card"}`)}
	}
	if err := write(ctx, msg("w-1")); err != nil {
		t.Fatalf("the writer's Write of one message: %v", err)
	}
	if err := write(ctx, msg("w-2"), msg("retry-once"), msg("poison")); err != nil {
		t.Fatalf("the writer's Write of three messages: %v", err)
	}
	var dup *outbox.DuplicateError
	if err := write(ctx, msg("w-1")); !errors.As(err, &dup) {
		t.Errorf("the writer's Write of a msg_id already there: %v, want a DuplicateError", err)
	}
	db := e.db(t, e.writer)
	table := e.schema + ".outbox"
	if _, err := db.Exec("INSERT INTO " + table + " (msg_id, topic, payload) VALUES ('sql-1', 'orders', '{}')"); err != nil {
		t.Fatalf("the writer's plain INSERT: %v", err)
	}
	for _, q := range []string{
		"UPDATE " + table + " SET status = 1",
		"DELETE FROM " + table,
		"SELECT payload FROM " + table,
		"SELECT headers FROM " + table,
		"SELECT * FROM " + e.schema + ".outbox_claims",
	} {
		rows, err := db.Query(q)
		if err == nil {
			rows.Close()
			t.Errorf("the writer could run %q", q)
		} else if !strings.Contains(strings.ToLower(err.Error()), "denied") {
			t.Errorf("the writer's %q failed otherwise than by a missing privilege: %v", q, err)
		}
	}
}

// refusingPublisher refuses "retry-once" once and "poison" for good.
type refusingPublisher struct {
	mu   sync.Mutex
	seen map[string]int
}

func (p *refusingPublisher) Publish(_ context.Context, msgs []outbox.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		p.seen[m.MsgID]++
		switch {
		case m.MsgID == "poison":
			errs[i] = outbox.Undeliverable(errors.New("no consumer takes it"))
		case m.MsgID == "retry-once" && p.seen[m.MsgID] == 1:
			errs[i] = errors.New("refused once")
		}
	}
	return errs
}

func checkRelay(t *testing.T, e *privilegeEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, _ := e.store(t, e.relay)
	relay, err := outbox.NewRelay(store, &refusingPublisher{seen: map[string]int{}}, outbox.RelayConfig{
		Interval: 20 * time.Millisecond, RetryBase: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	table := e.schema + ".outbox"
	count := func(where string) (n int64) {
		if err := e.admin.QueryRow("SELECT count(*) FROM " + table + " WHERE " + where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor(t, "4 messages SENT and 1 DEAD", 30*time.Second, func() bool {
		return count("status = 1") == 4 && count("status = 2 AND dead_at IS NOT NULL") == 1
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("relay: %v", err)
	}
	if n := count("msg_id = 'retry-once' AND retries = 1 AND status = 1"); n != 1 {
		t.Errorf("retry-once was not retried and sent")
	}

	check := mustRun(t, append([]string{"migrate", "--check", "--db", e.dsn(e.relay)}, e.tableFlags()...)...)
	if !strings.Contains(check.stdout, "is current") {
		t.Errorf("migrate --check as the relay: %s", check)
	}
	// An operator's reads and retry, with the relay's grants.
	mustRun(t, append([]string{"stats", "--db", e.dsn(e.relay)}, e.tableFlags()...)...)
	mustRun(t, append([]string{"dead", "retry", "--db", e.dsn(e.relay)}, append(e.tableFlags(), "poison")...)...)
	if n := count("msg_id = 'poison' AND status = 0 AND dead_at IS NULL"); n != 1 {
		t.Errorf("dead retry as the relay did not move poison back to NEW")
	}
	if _, err := e.admin.Exec("INSERT INTO " + e.schema + ".inbox (consumer_group, msg_id) VALUES ('g', 'w-1')"); err != nil {
		t.Fatal(err)
	}
	cleaner, err := outbox.NewCleaner(store, outbox.CleanerConfig{OlderThan: time.Nanosecond, InboxOlderThan: time.Nanosecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	rep, err := cleaner.RunOnce(ctx)
	if err != nil || rep.Sent != 4 || rep.Consumed != 1 {
		t.Errorf("cleanup as the relay: %+v, %v; want 4 SENT and 1 inbox record deleted", rep, err)
	}

	db := e.db(t, e.relay)
	for _, q := range []string{
		"DROP TABLE " + table,
		"ALTER TABLE " + table + " ADD COLUMN x INT",
		"DROP TABLE " + e.schema + ".outbox_claims",
		"TRUNCATE TABLE " + table,
		"INSERT INTO " + table + " (msg_id, topic, payload) VALUES ('r-1', 't', '{}')",
	} {
		if _, err := db.Exec(q); err == nil {
			t.Errorf("the relay could run %q", q)
		} else if msg := strings.ToLower(err.Error()); !strings.Contains(msg, "denied") && !strings.Contains(msg, "must be owner") {
			t.Errorf("the relay's %q failed otherwise than by a missing privilege: %v", q, err)
		}
	}
	if n := count("1 = 1"); n != 1 {
		t.Errorf("%d rows left, want the one retried by hand", n)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-go/outbox/admin"
)

// latestSchema is each dialect's newest schema version. PostgreSQL 2: the
// HOT claim, 3: the mark records the id sequence, 4: dead_at, 5: the DEAD
// index. MariaDB/MySQL 2: dead_at, 3: msg_id and consumer_group compared NO
// PAD. SQLite 2: dead_at, 3: the DEAD index. Then the key index of per-key
// order: PostgreSQL 8, MariaDB/MySQL 5, SQLite 4. PostgreSQL 9: a claim
// records the claim it took its chunk over from.
var latestSchema = map[string]int{"postgres": 10, "mysql": 5, "sqlite": 4}

// deadAtSchema is the schema version that added dead_at, per dialect.
var deadAtSchema = map[string]int{"postgres": 4, "mysql": 2, "sqlite": 2}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	eachBackend(t, false, func(t *testing.T, b *backend) {
		version := latestSchema[b.name]
		want := fmt.Sprintf("migrated %s tables \"outbox\", \"consumed_msg\" to version %d\n", b.name, version)
		for i := 0; i < 2; i++ {
			r := mustRun(t, "migrate", "--db", b.dsn)
			if r.stdout != want {
				t.Fatalf("run %d: stdout %q, want %q", i+1, r.stdout, want)
			}
		}
		// The tables are there and usable by a sidecar.
		b.insert(t, "m1", "t", `{"n":1}`)
		if got := b.status(t, "m1"); got != 0 {
			t.Fatalf("status of a fresh row = %d, want 0", got)
		}
	})
}

func TestMigrateCustomTablesFromEnvironment(t *testing.T) {
	t.Parallel()
	b := newSQLite(t)
	env := []string{"OUTBOX_DB=" + b.dsn, "OUTBOX_TABLE=orders_outbox", "OUTBOX_INBOX_TABLE=orders_inbox"}
	r := runCLI(t, env, "migrate")
	if r.code != 0 || !strings.Contains(r.stdout, `"orders_outbox", "orders_inbox"`) {
		t.Fatalf("migrate from the environment: %s", r)
	}
	b.exec(t, "INSERT INTO orders_outbox (msg_id, topic, payload) VALUES ('a', 't', '{}')")
	// The flag wins over the variable.
	r = runCLI(t, env, "stats", "--table", "outbox")
	if r.code != 1 || !strings.Contains(r.stderr, "outbox migrate") {
		t.Fatalf("stats --table outbox with OUTBOX_TABLE=orders_outbox should miss the tables: %s", r)
	}
}

// startRelay starts "outbox relay" and returns a function that stops it with
// SIGTERM and returns what it did.
func startRelay(t *testing.T, env []string, args ...string) (stop func() result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := cliCommand(ctx, env, append([]string{"relay"}, args...)...)
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start relay: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	stop = func() result {
		t.Helper()
		defer cancel()
		if stopped {
			t.Fatal("relay stopped twice")
		}
		stopped = true
		select {
		case err := <-done:
			t.Fatalf("relay ended before SIGTERM: %v\nstderr:\n%s", err, stderr.String())
		default:
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("SIGTERM: %v", err)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("relay did not stop within 30s of SIGTERM\nstderr:\n%s", stderr.String())
		}
		return result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
	}
	t.Cleanup(func() {
		if !stopped {
			cmd.Process.Kill()
			<-done
			cancel()
		}
	})
	return stop
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestRelayPublishesSidecarRowsAndStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	eachBackend(t, true, func(t *testing.T, b *backend) {
		for i := 1; i <= 5; i++ {
			b.insert(t, fmt.Sprintf("order-%d:OrderPaid", i), "order.paid", fmt.Sprintf(`{"order":%d}`, i))
		}
		stop := startRelay(t, nil, "--db", b.dsn, "--broker", "discard:", "--interval", "50ms",
			"--batch", "2", "--log-level", "debug", "--stats-interval", "100ms")
		waitFor(t, "all rows SENT", 30*time.Second, func() bool { return b.count(t, "status = 1") == 5 })
		// A row written while the relay runs is picked up too.
		b.insert(t, "late", "order.paid", `{"late":true}`)
		waitFor(t, "the late row SENT", 30*time.Second, func() bool { return b.status(t, "late") == 1 })
		time.Sleep(250 * time.Millisecond) // let a totals line through
		r := stop()
		if r.code != 0 {
			t.Fatalf("relay after SIGTERM: %s", r)
		}
		for _, want := range []string{"relay started", "msg=batch", "relay totals", "relay stopped", "sent=6"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("relay log lacks %q:\n%s", want, r.stderr)
			}
		}
		if n := b.count(t, "sent_at IS NULL"); n != 0 {
			t.Errorf("%d rows have no sent_at", n)
		}
	})
}

func TestRelayToWebhook(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]http.Header{}
	bodies := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.Header.Get("Ce-Id")] = r.Header.Clone()
		bodies[r.Header.Get("Ce-Id")] = string(body)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	b := newSQLite(t)
	mustRun(t, "migrate", "--db", b.dsn)
	b.insert(t, "w1", "user.created", `{"user":"ann"}`)
	env := []string{"OUTBOX_DB=" + b.dsn, "OUTBOX_BROKER=" + srv.URL + "/events", "OUTBOX_WEBHOOK_SECRET=hush-hush-secret",
		"OUTBOX_SOURCE=/billing", "OUTBOX_INTERVAL=50ms", "OUTBOX_LOG_FORMAT=json"}
	stop := startRelay(t, env)
	waitFor(t, "w1 SENT", 30*time.Second, func() bool { return b.status(t, "w1") == 1 })
	r := stop()
	if r.code != 0 {
		t.Fatalf("relay: %s", r)
	}
	if strings.Contains(r.stderr, "hush-hush-secret") {
		t.Fatalf("the webhook secret appears in the log:\n%s", r.stderr)
	}
	if !strings.HasPrefix(strings.TrimSpace(r.stderr), "{") {
		t.Errorf("--log-format json from OUTBOX_LOG_FORMAT not applied:\n%s", r.stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	h := got["w1"]
	if h == nil {
		t.Fatalf("the endpoint did not receive w1; got %v", got)
	}
	if h.Get("Ce-Type") != "user.created" || h.Get("Ce-Source") != "/billing" || h.Get("Webhook-Signature") == "" {
		t.Errorf("headers: %v", h)
	}
	if bodies["w1"] != `{"user":"ann"}` && bodies["w1"] != `{"user": "ann"}` {
		t.Errorf("body %q", bodies["w1"])
	}
}

func TestRelayBeforeMigrate(t *testing.T) {
	t.Parallel()
	eachBackend(t, false, func(t *testing.T, b *backend) {
		if b.name == "sqlite" {
			// The file must exist for the check to be about the tables.
			b.exec(t, "CREATE TABLE unrelated (x INTEGER)")
		}
		r := runCLI(t, nil, "relay", "--db", b.dsn, "--broker", "discard:")
		if r.code != 1 || !strings.Contains(r.stderr, "run 'outbox migrate'") || strings.Count(r.stderr, "\n") != 1 {
			t.Fatalf("relay before migrate: %s", r)
		}
	})
}

// TestRelayOnAnOlderSchema: a relay that needs a newer schema than the
// tables have (PostgreSQL's version 2 adds the HOT claim's tables) says to
// migrate, and migrate brings the tables up from version 1.
func TestRelayOnAnOlderSchema(t *testing.T) {
	t.Parallel()
	b := newPostgres(t)
	mustRun(t, "migrate", "--db", b.dsn)
	b.insert(t, "m1", "t", `{}`)
	// Back to version 1, as a table migrated by an earlier release has it.
	b.exec(t, "DROP TABLE outbox_horizon")
	b.exec(t, "DROP INDEX outbox_requeued_idx")
	b.exec(t, "CREATE INDEX outbox_pending_idx ON outbox (id) WHERE status = 0")
	b.exec(t, "ALTER TABLE outbox DROP COLUMN dead_at")
	b.exec(t, "DELETE FROM outbox_migrations WHERE version >= 2")
	relayRefusesUntilMigrated(t, b, 1)
	if n := b.count(t, "msg_id = 'm1' AND status = 0"); n != 1 {
		t.Fatalf("the pending row after the migration: %d", n)
	}
	if n := b.queryInt(t, "SELECT count(*) FROM pg_indexes WHERE indexname = 'outbox_pending_idx'"); n != 0 {
		t.Fatal("the migration left the pending index")
	}
}

// relayRefusesUntilMigrated checks that a relay refuses tables at schema
// version from, saying to migrate, and that migrate brings them to the latest version.
func relayRefusesUntilMigrated(t *testing.T, b *backend, from int) {
	t.Helper()
	r := runCLI(t, nil, "relay", "--db", b.dsn, "--broker", "discard:")
	if r.code != 1 || !strings.Contains(r.stderr, fmt.Sprintf("schema version %d", from)) || !strings.Contains(r.stderr, "run 'outbox migrate'") {
		t.Fatalf("relay on a version %d schema: %s", from, r)
	}
	if r := runCLI(t, nil, "migrate", "--db", b.dsn); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("to version %d", latestSchema["postgres"])) {
		t.Fatalf("migrate from version %d: %s", from, r)
	}
}

// TestMigrateFromVersion2: version 3 records the id sequence the low-water
// mark was measured against, as it is at the migration, so that the mark
// does not start again from 0.
func TestMigrateFromVersion2(t *testing.T) {
	t.Parallel()
	b := newPostgres(t)
	mustRun(t, "migrate", "--db", b.dsn)
	b.exec(t, "UPDATE outbox_horizon SET lwm = 7")
	b.exec(t, "ALTER TABLE outbox_horizon DROP COLUMN seq_node")
	b.exec(t, "ALTER TABLE outbox DROP COLUMN dead_at")
	b.exec(t, "DELETE FROM outbox_migrations WHERE version >= 3")
	relayRefusesUntilMigrated(t, b, 2)
	if n := b.queryInt(t, `SELECT count(*) FROM outbox_horizon WHERE lwm = 7 AND seq_node <> 0
  AND seq_node = pg_relation_filenode(pg_get_serial_sequence('outbox', 'id')::regclass)`); n != 1 {
		t.Fatal("after the migration the horizon does not hold the mark and the id sequence's relfilenode")
	}
}

// TestMigrateFromVersion3: version 4 gives DEAD rows a dead_at and takes
// them out of the requeued index. A row made DEAD before it kept the time its
// last attempt came due in next_retry_at; that becomes its dead_at.
func TestMigrateFromVersion3(t *testing.T) {
	t.Parallel()
	b := newPostgres(t)
	mustRun(t, "migrate", "--db", b.dsn)
	b.insert(t, "d1", "t", `{}`)
	b.insert(t, "n1", "t", `{}`)
	b.exec(t, "ALTER TABLE outbox DROP COLUMN dead_at")
	b.exec(t, "UPDATE outbox SET status = 2, retries = 10, last_error = 'boom', next_retry_at = created_at + interval '90 seconds' WHERE msg_id = 'd1'")
	b.exec(t, "DELETE FROM outbox_migrations WHERE version >= 4")
	relayRefusesUntilMigrated(t, b, 3)
	if n := b.count(t, "msg_id = 'd1' AND status = 2 AND dead_at = created_at + interval '90 seconds' AND next_retry_at = created_at"); n != 1 {
		t.Fatal("after the migration the DEAD row does not hold its last attempt's time in dead_at, out of the requeued index")
	}
	if n := b.count(t, "msg_id = 'n1' AND status = 0 AND dead_at IS NULL AND next_retry_at = created_at"); n != 1 {
		t.Fatal("the migration changed a pending row")
	}
}

// TestAdminOnAnOlderSchema: an admin command on tables that lack a column of
// the current schema says to migrate, in one line.
func TestAdminOnAnOlderSchema(t *testing.T) {
	t.Parallel()
	eachBackend(t, true, func(t *testing.T, b *backend) {
		// As the tables were before dead_at.
		b.exec(t, "ALTER TABLE outbox DROP COLUMN dead_at")
		b.exec(t, fmt.Sprintf("DELETE FROM outbox_migrations WHERE version >= %d", deadAtSchema[b.name]))
		r := runCLI(t, nil, "dead", "list", "--db", b.dsn)
		if r.code != 1 || !strings.Contains(r.stderr, "run `outbox migrate`") || !strings.Contains(r.stderr, "a column is missing") ||
			strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Fatalf("dead list on tables without dead_at: %s", r)
		}
		mustRun(t, "migrate", "--db", b.dsn)
		mustRun(t, "dead", "list", "--db", b.dsn)
	})
}

func TestStats(t *testing.T) {
	t.Parallel()
	eachBackend(t, true, func(t *testing.T, b *backend) {
		b.insert(t, "a1", "alpha", `{}`)
		b.insert(t, "a2", "alpha", `{}`)
		b.insert(t, "a3", "alpha", `{}`)
		b.insert(t, "b1", "beta", `{}`)
		b.insert(t, "b2", "beta", `{}`)
		b.exec(t, "UPDATE outbox SET status = 1, sent_at = created_at WHERE msg_id = 'a3'")
		b.exec(t, "UPDATE outbox SET status = 2, retries = 10, last_error = 'boom' WHERE msg_id = 'b2'")
		b.exec(t, "UPDATE outbox SET created_at = "+b.tenDaysAgo+" WHERE msg_id = 'a1'")

		r := mustRun(t, "stats", "--db", b.dsn)
		for _, re := range []string{
			`(?m)^pending:\s+3$`, `(?m)^sent:\s+~[1-5] \(estimate\)$`, `(?m)^dead:\s+1$`,
			`(?m)^oldest pending:\s+2(39|40|41)h\d+m\d+s$`,
			`(?m)^TOPIC\s+PENDING\s+OLDEST PENDING\s+DEAD$`,
			`(?m)^alpha\s+2\s+2(39|40|41)h\S+\s+0$`,
			`(?m)^beta\s+1\s+\S+\s+1$`,
		} {
			if !regexp.MustCompile(re).MatchString(r.stdout) {
				t.Errorf("stats output does not match %s:\n%s", re, r.stdout)
			}
		}

		r = mustRun(t, "stats", "--db", b.dsn, "--json")
		var st statsOutput
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatalf("stats --json is not JSON: %v\n%s", err, r.stdout)
		}
		if st.Pending != 3 || !st.SentEstimated || st.Sent < 1 || st.Dead != 1 || st.Table != "outbox" || len(st.Topics) != 2 {
			t.Fatalf("stats --json: %+v", st)
		}
		if age := st.OldestPendingAgeSeconds; age < 9*86400 || age > 11*86400 {
			t.Errorf("oldest pending age %.0fs, want about 10 days", age)
		}
		alpha, beta := st.Topics[0], st.Topics[1]
		if alpha.Topic != "alpha" || alpha.Pending != 2 || beta.Topic != "beta" || beta.Pending != 1 || beta.Dead != 1 {
			t.Errorf("per topic: %+v", st.Topics)
		}
		// PostgreSQL's low-water mark: no relay has swept yet, so the rescans
		// start from the first row, written ten days ago.
		if b.name != "postgres" {
			if st.RescanMark != nil {
				t.Errorf("%s has no rescan mark, got %+v", b.name, st.RescanMark)
			}
			return
		}
		if m := st.RescanMark; m == nil || m.ID != 0 || m.NewestID < 5 || m.BehindSeconds < 9*86400 {
			t.Errorf("rescan mark: %+v, want id 0 of the newest id, about 10 days behind", st.RescanMark)
		}
		r = mustRun(t, "stats", "--db", b.dsn)
		if !regexp.MustCompile(`(?m)^rescans from:\s+id 0 of \d+ \(first row above it written 2(39|40|41)h\S+ ago\)$`).MatchString(r.stdout) {
			t.Errorf("stats output has no rescan mark line:\n%s", r.stdout)
		}
	})
}

func TestStatsEmpty(t *testing.T) {
	t.Parallel()
	b := newSQLite(t)
	mustRun(t, "migrate", "--db", b.dsn)
	r := mustRun(t, "stats", "--db", b.dsn, "--json")
	if !strings.Contains(r.stdout, `"topics": []`) || !strings.Contains(r.stdout, `"pending": 0`) {
		t.Fatalf("empty stats --json:\n%s", r.stdout)
	}
	r = mustRun(t, "stats", "--db", b.dsn)
	if !regexp.MustCompile(`(?m)^oldest pending:\s+-$`).MatchString(r.stdout) {
		t.Fatalf("empty stats:\n%s", r.stdout)
	}
}

func TestDead(t *testing.T) {
	t.Parallel()
	eachBackend(t, true, func(t *testing.T, b *backend) {
		for _, m := range []struct{ id, topic string }{{"d1", "x"}, {"d2", "x"}, {"d3", "y"}, {"n1", "x"}} {
			b.insert(t, m.id, m.topic, fmt.Sprintf(`{"id":%q,"nested":{"n":1}}`, m.id))
		}
		b.exec(t, `UPDATE outbox SET headers = '{"tenant":"acme"}' WHERE msg_id = 'd1'`)
		b.exec(t, "UPDATE outbox SET status = 2, retries = 10, dead_at = created_at, last_error = "+concat(b, "'boom-'", "msg_id")+" WHERE msg_id LIKE 'd%'")
		b.exec(t, "UPDATE outbox SET last_error = ? WHERE msg_id = 'd3'", strings.Repeat("very long error ", 20))
		db := []string{"--db", b.dsn}

		// list
		r := mustRun(t, append([]string{"dead", "list"}, db...)...)
		if !regexp.MustCompile(`(?m)^ID\s+MSG_ID\s+TOPIC\s+RETRIES\s+DEAD_AT\s+LAST_ERROR$`).MatchString(r.stdout) ||
			!regexp.MustCompile(`(?m)^\d+\s+d1\s+x\s+10\s+\d{4}-\d\d-\d\dT\S+Z\s+boom-d1$`).MatchString(r.stdout) ||
			!strings.Contains(r.stdout, "d2") || !strings.Contains(r.stdout, "d3") || strings.Contains(r.stdout, "n1") {
			t.Fatalf("dead list:\n%s", r.stdout)
		}
		if !strings.Contains(r.stdout, "…") || strings.Count(r.stdout, "very long error") > 6 {
			t.Errorf("dead list does not truncate a long last_error:\n%s", r.stdout)
		}
		r = mustRun(t, append([]string{"dead", "list", "--topic", "y"}, db...)...)
		if strings.Contains(r.stdout, "d1") || !strings.Contains(r.stdout, "d3") {
			t.Errorf("dead list --topic y:\n%s", r.stdout)
		}
		r = mustRun(t, append([]string{"dead", "list", "--json"}, db...)...)
		var listed []admin.Message
		if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || len(listed) != 3 {
			t.Fatalf("dead list --json (%v):\n%s", err, r.stdout)
		}
		if listed[0].MsgID != "d1" || listed[0].Status != "DEAD" || listed[0].Retries != 10 || listed[0].LastError != "boom-d1" ||
			listed[0].DeadAt == nil || !listed[0].DeadAt.Equal(*listed[0].CreatedAt) {
			t.Errorf("dead list --json first entry: %+v", listed[0])
		}
		r = mustRun(t, append([]string{"dead", "list", "--limit", "1"}, db...)...)
		if strings.Count(r.stdout, "boom-") != 1 || !strings.Contains(r.stderr, fmt.Sprintf("--after-id %d", listed[0].ID)) {
			t.Errorf("dead list --limit 1: %s", r)
		}
		r = mustRun(t, append([]string{"dead", "list", "--after-id", fmt.Sprint(listed[0].ID)}, db...)...)
		if strings.Contains(r.stdout, "d1") || !strings.Contains(r.stdout, "d2") || !strings.Contains(r.stdout, "d3") {
			t.Errorf("dead list --after-id:\n%s", r.stdout)
		}

		// show, of a DEAD and of a NEW message
		r = mustRun(t, append([]string{"dead", "show", "d1"}, db...)...)
		for _, want := range []string{"msg_id:        d1", "status:        DEAD", "retries:       10", "last_error:    boom-d1",
			"tenant: acme", "payload:\n{\n  \"id\": \"d1\",\n  \"nested\": {\n    \"n\": 1\n  }\n}\n"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("dead show d1 lacks %q:\n%s", want, r.stdout)
			}
		}
		r = mustRun(t, append([]string{"dead", "show", "n1", "--json"}, db...)...)
		var shown admin.Message
		if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || shown.Status != "NEW" || !strings.Contains(string(shown.Payload), `"n1"`) {
			t.Errorf("dead show n1 --json (%v):\n%s", err, r.stdout)
		}
		r = runCLI(t, nil, append([]string{"dead", "show", "nope"}, db...)...)
		if r.code != 1 || !strings.Contains(r.stderr, `no message with msg_id "nope"`) {
			t.Errorf("dead show of a missing message: %s", r)
		}

		// retry by msg_id: back to NEW, retries reset, recorded
		r = mustRun(t, append([]string{"dead", "retry", "d1", "n1"}, db...)...)
		if !strings.HasPrefix(r.stdout, "retried 1 DEAD message") {
			t.Errorf("dead retry d1 n1: %s", r)
		}
		if b.status(t, "d1") != 0 || b.queryInt(t, "SELECT retries FROM outbox WHERE msg_id = 'd1'") != 0 ||
			b.count(t, "msg_id = 'd1' AND dead_at IS NULL") != 1 {
			t.Errorf("d1 was not moved back to NEW with retries 0 and no dead_at")
		}
		var lastErr string
		if err := b.db.QueryRow("SELECT last_error FROM outbox WHERE msg_id = 'd1'").Scan(&lastErr); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^retried by operator at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ via outbox dead retry; previous error: boom-d1$`).MatchString(lastErr) {
			t.Errorf("last_error after retry: %q", lastErr)
		}
		// retry --all --topic: only that topic
		r = mustRun(t, append([]string{"dead", "retry", "--all", "--topic", "y"}, db...)...)
		if !strings.HasPrefix(r.stdout, `retried 1 DEAD message of topic "y"`) || b.status(t, "d3") != 0 || b.status(t, "d2") != 2 {
			t.Errorf("dead retry --all --topic y: %s", r)
		}

		// drop: a NEW message is never dropped, --all needs --yes
		r = mustRun(t, append([]string{"dead", "drop", "n1"}, db...)...)
		if !strings.HasPrefix(r.stdout, "dropped 0 DEAD messages") || b.count(t, "msg_id = 'n1'") != 1 {
			t.Errorf("dead drop of a NEW message: %s", r)
		}
		b.exec(t, "UPDATE outbox SET status = 2 WHERE msg_id IN ('d1', 'd3')")
		r = mustRun(t, append([]string{"dead", "drop", "d1"}, db...)...)
		if !strings.HasPrefix(r.stdout, "dropped 1 DEAD message") || b.count(t, "msg_id = 'd1'") != 0 {
			t.Errorf("dead drop d1: %s", r)
		}
		r = runCLI(t, []string{"OUTBOX_YES=true", "OUTBOX_ALL=true"}, append([]string{"dead", "drop", "--all"}, db...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "--yes") || b.count(t, "status = 2") != 2 {
			t.Errorf("dead drop --all without --yes (OUTBOX_YES must not count): %s", r)
		}
		r = mustRun(t, append([]string{"dead", "drop", "--all", "--yes"}, db...)...)
		if !strings.HasPrefix(r.stdout, "dropped 2 DEAD messages") || b.count(t, "1 = 1") != 1 || b.count(t, "msg_id = 'n1'") != 1 {
			t.Errorf("dead drop --all --yes: %s", r)
		}
		r = mustRun(t, append([]string{"dead", "list"}, db...)...)
		if strings.TrimSpace(r.stdout) != "no DEAD messages" {
			t.Errorf("dead list after drop:\n%s", r.stdout)
		}

		// neither ids nor --all, or both
		for _, args := range [][]string{{"dead", "retry"}, {"dead", "drop"}, {"dead", "retry", "--topic", "x"}, {"dead", "drop", "d2", "--all", "--yes"}} {
			r = runCLI(t, nil, append(args, db...)...)
			if r.code != 2 || !strings.Contains(r.stderr, "--all") {
				t.Errorf("%v: %s", args, r)
			}
		}
	})
}

func concat(b *backend, a, c string) string {
	if b.name == "mysql" {
		return "CONCAT(" + a + ", " + c + ")"
	}
	return a + " || " + c
}

func TestCleanup(t *testing.T) {
	t.Parallel()
	eachBackend(t, true, func(t *testing.T, b *backend) {
		for _, id := range []string{"old1", "old2", "old3", "recent", "new-old", "dead-old"} {
			b.insert(t, id, "t", `{}`)
		}
		b.exec(t, "UPDATE outbox SET status = 1, sent_at = "+b.tenDaysAgo+" WHERE msg_id LIKE 'old%'")
		b.exec(t, "UPDATE outbox SET status = 1, sent_at = created_at WHERE msg_id = 'recent'")
		// A NEW or DEAD row with an old sent_at (as no real row has) is still kept:
		// cleanup deletes by status, not by date alone.
		b.exec(t, "UPDATE outbox SET created_at = "+b.tenDaysAgo+", sent_at = "+b.tenDaysAgo+" WHERE msg_id = 'new-old'")
		b.exec(t, "UPDATE outbox SET status = 2, created_at = "+b.tenDaysAgo+", sent_at = "+b.tenDaysAgo+" WHERE msg_id = 'dead-old'")
		db := []string{"--db", b.dsn}

		r := mustRun(t, append([]string{"cleanup", "--older-than", "168h", "--batch", "1", "--max-batches", "1"}, db...)...)
		if r.stdout != "deleted 1 SENT message older than 168h0m0s from table \"outbox\"\n" {
			t.Errorf("cleanup --max-batches 1: %s", r)
		}
		r = mustRun(t, append([]string{"cleanup", "--older-than", "168h", "--batch", "1", "--duty-cycle", "0.5"}, db...)...)
		if !strings.HasPrefix(r.stdout, "deleted 2 SENT messages") {
			t.Errorf("cleanup --batch 1: %s", r)
		}
		r = mustRun(t, append([]string{"cleanup", "--older-than", "168h"}, db...)...)
		if !strings.HasPrefix(r.stdout, "deleted 0 SENT messages") {
			t.Errorf("cleanup with nothing left: %s", r)
		}
		for _, id := range []string{"recent", "new-old", "dead-old"} {
			if b.count(t, "msg_id = ?", id) != 1 {
				t.Errorf("cleanup deleted %s", id)
			}
		}
		if n := b.count(t, "msg_id LIKE 'old%'"); n != 0 {
			t.Errorf("%d old SENT rows left", n)
		}
		// --older-than 0 takes every SENT row, and still nothing else.
		r = mustRun(t, append([]string{"cleanup", "--older-than", "0s"}, db...)...)
		if !strings.HasPrefix(r.stdout, "deleted 1 SENT message ") || b.count(t, "1 = 1") != 2 {
			t.Errorf("cleanup --older-than 0s: %s", r)
		}
	})
}

// TestCleanupInbox deletes old inbox records of every group and keeps the
// recent ones, alone or with the SENT messages.
func TestCleanupInbox(t *testing.T) {
	t.Parallel()
	eachBackend(t, true, func(t *testing.T, b *backend) {
		for _, r := range [][2]string{{"billing", "m-1"}, {"billing", "m-2"}, {"audit", "m-1"}, {"billing", "m-3"}} {
			b.exec(t, "INSERT INTO consumed_msg (consumer_group, msg_id) VALUES (?, ?)", r[0], r[1])
		}
		b.exec(t, "UPDATE consumed_msg SET consumed_at = "+b.tenDaysAgo+" WHERE msg_id <> 'm-3'")
		b.insert(t, "old", "t", `{}`)
		b.exec(t, "UPDATE outbox SET status = 1, sent_at = "+b.tenDaysAgo)
		db := []string{"--db", b.dsn}
		r := mustRun(t, append([]string{"cleanup", "--inbox-older-than", "168h", "--batch", "2"}, db...)...)
		if r.stdout != "deleted 3 inbox records older than 168h0m0s from table \"consumed_msg\"\n" {
			t.Errorf("cleanup --inbox-older-than: %s", r)
		}
		inbox := b.queryInt(t, "SELECT count(*) FROM consumed_msg")
		if inbox != 1 || b.count(t, "1 = 1") != 1 {
			t.Errorf("%d inbox records left (want m-3's), %d outbox rows (want the SENT one, not asked for)", inbox, b.count(t, "1 = 1"))
		}
		r = mustRun(t, append([]string{"cleanup", "--older-than", "168h", "--inbox-older-than", "0s"}, db...)...)
		if r.stdout != "deleted 1 SENT message older than 168h0m0s from table \"outbox\"\n"+
			"deleted 1 inbox record older than 0s from table \"consumed_msg\"\n" {
			t.Errorf("cleanup of both: %s", r)
		}
	})
}

// Several workers in one relay process share the table: every message is
// delivered exactly once in normal operation, and SIGTERM stops them all.
func TestRelayWorkers(t *testing.T) {
	t.Parallel()
	eachBackend(t, true, func(t *testing.T, b *backend) {
		var mu sync.Mutex
		seen := map[string]int{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[r.Header.Get("Ce-Id")]++
			mu.Unlock()
			time.Sleep(time.Millisecond) // let the workers overlap
			w.WriteHeader(http.StatusOK)
		}))
		defer srv.Close()
		const n = 150
		for i := range n {
			b.insert(t, fmt.Sprintf("w-%03d", i), "order.paid", fmt.Sprintf(`{"n":%d}`, i))
		}
		stop := startRelay(t, nil, "--db", b.dsn, "--broker", srv.URL, "--workers", "3", "--batch", "10",
			"--interval", "20ms", "--concurrency", "2")
		waitFor(t, "all rows SENT", 60*time.Second, func() bool { return b.count(t, "status = 1") == n })
		r := stop()
		if r.code != 0 || !strings.Contains(r.stderr, "workers=3") {
			t.Fatalf("relay --workers 3: %s", r)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != n {
			t.Fatalf("%d distinct messages delivered, want %d", len(seen), n)
		}
		for id, c := range seen {
			if c != 1 {
				t.Errorf("%s delivered %d times by three workers", id, c)
			}
		}
	})
	r := runCLI(t, nil, "relay", "--db", "sqlite:x.db", "--broker", "discard:", "--workers", "0")
	if r.code != 2 || !strings.Contains(r.stderr, "--workers") {
		t.Fatalf("--workers 0: %s", r)
	}
}

// silentListener accepts connections and never answers, as a database or
// broker behind a firewall that drops replies would. It returns its address.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// SIGTERM while the relay is still starting (connecting to a database or a
// broker that does not answer) stops it as SIGTERM always does: exit 0.
func TestRelaySIGTERMDuringStartUpExitsZero(t *testing.T) {
	t.Parallel()
	sqlite := newSQLite(t)
	mustRun(t, "migrate", "--db", sqlite.dsn)
	for _, tc := range []struct {
		name, db, broker string
		within           time.Duration // from SIGTERM to exit
	}{
		{"postgres", "postgres://postgres@" + silentListener(t) + "/test?sslmode=disable", "discard:", 5 * time.Second},
		{"mysql", "mysql://root@" + silentListener(t) + "/test", "discard:", 5 * time.Second},
		// The NATS client's connect does not watch ctx; it gives up on its
		// own time-out.
		{"broker", sqlite.dsn, "nats://" + silentListener(t), 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stop := startRelay(t, nil, "--db", tc.db, "--broker", tc.broker)
			time.Sleep(time.Second)
			start := time.Now()
			r := stop()
			if r.code != 0 {
				t.Fatalf("relay SIGTERMed during start-up: %s", r)
			}
			if !strings.Contains(r.stderr, "relay stopped during start-up") || !strings.Contains(r.stderr, "terminated signal received") {
				t.Errorf("no line saying the relay stopped during start-up:\n%s", r)
			}
			if took := time.Since(start); took > tc.within {
				t.Errorf("the relay took %s to stop after SIGTERM", took)
			}
		})
	}
}

// TestIdleRelayIsQuiet: a relay with nothing to do logs that it started and
// stopped, and nothing in between, at the default level.
func TestIdleRelayIsQuiet(t *testing.T) {
	t.Parallel()
	b := newSQLite(t)
	mustRun(t, "migrate", "--db", b.dsn)
	b.insert(t, "q1", "orders", `{"n":1}`)
	stop := startRelay(t, nil, "--db", b.dsn, "--broker", "discard:", "--interval", "20ms", "--stats-interval", "100ms")
	waitFor(t, "q1 SENT", 30*time.Second, func() bool { return b.status(t, "q1") == 1 })
	time.Sleep(300 * time.Millisecond)  // the totals line of the batch that sent q1
	time.Sleep(1500 * time.Millisecond) // some 75 empty polls and 15 stats ticks
	r := stop()
	if r.code != 0 {
		t.Fatalf("relay: %s", r)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	var totals int
	for _, l := range lines {
		if strings.Contains(l, "relay totals") {
			totals++
		}
	}
	// started, at most one totals line for q1's batch and none while idle, stopped.
	if totals > 1 || len(lines) > 3 || !strings.Contains(lines[0], "relay started") || !strings.Contains(lines[len(lines)-1], "relay stopped") {
		t.Fatalf("an idle relay logged %d lines (%d totals):\n%s", len(lines), totals, r.stderr)
	}
}

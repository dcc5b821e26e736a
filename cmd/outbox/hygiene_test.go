package main

import (
	"encoding/json"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/clitest"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/admin"
)

// noSecret fails the test if any of secrets appears in what.
func noSecret(t *testing.T, where, what string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(what, s) {
			t.Errorf("%s shows the secret %q:\n%s", where, s, what)
		}
	}
}

// TestRelayHidesWebhookCredentials runs a relay whose webhook URL holds a
// password and secret query values, on every database: a message the
// endpoint refuses goes DEAD, and neither the relay's log, nor its
// last_error as dead list, dead show and the admin API serve it, holds them.
// A row written by an older release, whose last_error holds a token, is
// served masked too.
func TestRelayHidesWebhookCredentials(t *testing.T) {
	t.Parallel()
	secrets := []string{"hook-pw-s3cret", "hook-t0ken-s3cret", "hook-s1g-s3cret", "hook-k3y-s3cret", "adm-t0ken-s3cret", "old-t0ken-s3cret"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Ce-Id") == "poison" {
			http.Error(w, "cannot digest this one", http.StatusUnprocessableEntity)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close) // after the parallel subtests
	hook := strings.Replace(srv.URL, "http://", "http://user:hook-pw-s3cret@", 1) +
		"/hook?token=hook-t0ken-s3cret&X-Signature=hook-s1g-s3cret&api_key=hook-k3y-s3cret&topic=a"
	eachBackend(t, true, func(t *testing.T, b *backend) {
		b.insert(t, "poison", "order.paid", `{}`)
		b.insert(t, "fine", "order.paid", `{}`)
		b.insert(t, "old", "order.paid", `{}`)
		b.exec(t, "UPDATE outbox SET status = 2, retries = 10, dead_at = created_at, last_error = ? WHERE msg_id = 'old'",
			"webhook: POST https://hooks.example/in?token=old-t0ken-s3cret: 503 Service Unavailable")
		var stderr func() string
		stop := startRelayLogged(t, &stderr, []string{"OUTBOX_ADMIN_TOKEN=adm-t0ken-s3cret"},
			"--db", b.dsn, "--broker", hook, "--max-retries", "1", "--retry-budget", "0", "--interval", "50ms", "--log-level", "debug",
			"--admin-addr", "127.0.0.1:0")
		base := urlInLog(t, stderr, adminURL)
		waitFor(t, "poison DEAD and fine SENT", 30*time.Second, func() bool {
			return b.status(t, "poison") == 2 && b.status(t, "fine") == 1
		})
		for _, path := range []string{"/messages/poison", "/messages/old", "/messages?status=dead"} {
			code, body := adminCall(t, "GET", base+path, "adm-t0ken-s3cret", "")
			if code != 200 || !strings.Contains(body, "xxxxx") {
				t.Errorf("GET /admin%s: %d %s", path, code, body)
			}
			noSecret(t, "GET /admin"+path, body, secrets...)
		}
		r := stop()
		if r.code != 0 {
			t.Fatalf("relay: %s", r)
		}
		if !strings.Contains(r.stderr, "relay started") || !strings.Contains(r.stderr, "token=xxxxx") {
			t.Errorf("the relay's log should name the masked URL:\n%s", r.stderr)
		}
		noSecret(t, "the relay's log", r.stderr, secrets...)

		var stored string
		if err := b.db.QueryRow(b.rewrite("SELECT last_error FROM outbox WHERE msg_id = ?"), "poison").Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stored, "422") || !strings.Contains(stored, "xxxxx") {
			t.Errorf("last_error of poison: %q", stored)
		}
		noSecret(t, "the stored last_error", stored, secrets...)

		db := []string{"--db", b.dsn}
		for _, args := range [][]string{
			{"dead", "list"}, {"dead", "list", "--json"}, {"dead", "show", "poison"}, {"dead", "show", "poison", "--json"},
			{"dead", "show", "old"}, {"dead", "show", "old", "--json"},
		} {
			r := mustRun(t, append(args, db...)...)
			if !strings.Contains(r.stdout, "xxxxx") {
				t.Errorf("outbox %s shows no masked URL:\n%s", strings.Join(args, " "), r.stdout)
			}
			noSecret(t, "outbox "+strings.Join(args, " "), r.stdout+r.stderr, secrets...)
		}
	})
}

// TestRelayHidesNATSCredentials: a NATS URL's token and password appear
// neither in the relay's log ("relay started" names the broker) nor in the
// log lines about a server that cannot be reached.
func TestRelayHidesNATSCredentials(t *testing.T) {
	t.Parallel()
	secrets := []string{"nats-t0ken-s3cret", "nats-pw-s3cret", "nats-pw%2Fs3cret", "nats-pw/s3cret"}
	b := newSQLite(t)
	mustRun(t, "migrate", "--db", b.dsn)
	sfx := clitest.RandomHex()
	t.Cleanup(func() { clitest.DeleteStreams("nats://127.0.0.1:4222", "CLIH_"+sfx) })
	query := fmt.Sprintf("?subject=clih%s.{topic}&stream=CLIH_%s&max_age=10m", sfx, sfx)
	for _, url := range []string{
		"nats://nats-t0ken-s3cret@127.0.0.1:4222" + query,
		"nats://user:nats-pw%2Fs3cret@127.0.0.1:4222,nats://nats-t0ken-s3cret@127.0.0.1:4222" + query,
	} {
		var stderr func() string
		stop := startRelayLogged(t, &stderr, nil, "--db", b.dsn, "--broker", url, "--interval", "50ms")
		waitFor(t, "relay started", 30*time.Second, func() bool { return strings.Contains(stderr(), "relay started") })
		r := stop()
		if r.code != 0 {
			t.Fatalf("relay --broker %s: %s", url, r)
		}
		if !strings.Contains(r.stderr, "nats://xxxxx@127.0.0.1:4222") {
			t.Errorf("the log should name the masked broker:\n%s", r.stderr)
		}
		noSecret(t, "the relay's log", r.stderr, secrets...)
	}
	// A server that cannot be reached is waited for; the log says why.
	var stderr func() string
	stop := startRelayLogged(t, &stderr, nil, "--db", b.dsn, "--broker", "nats://nats-t0ken-s3cret@127.0.0.1:1,nats://u:nats-pw%2Fs3cret@127.0.0.1:2")
	waitFor(t, "the relay to wait for the broker", 30*time.Second, func() bool { return strings.Contains(stderr(), "check --broker") })
	r := stop()
	if r.code != 0 {
		t.Fatalf("relay stopped while waiting for the broker: %s", r)
	}
	noSecret(t, "the relay's log", r.stderr, secrets...)
}

// TestDSNPasswordWithReservedCharacters: a password holding an unencoded
// "/", "?", "#" or "@", in a URL or in the go-sql-driver form, is never
// printed, not even up to that character; percent-encoded, it works.
func TestDSNPasswordWithReservedCharacters(t *testing.T) {
	t.Parallel()
	parts := []string{"p4ss", "w0rd", "q#f", "s3cr3t", "1234/", "tok3nonly"}
	for _, tc := range []struct {
		dsn  string
		want []string
	}{
		{"mysql://root:p4ss/w0rd?q#f@127.0.0.1:3306/test", []string{`"/", "?" or "#" that is not percent-encoded`, "%2F"}},
		{"mysql://root:1234/s3cr3t@127.0.0.1:3306/test", []string{"not percent-encoded"}},
		{"mysql://root:p4ss@w0rd@127.0.0.1:3306/test", []string{`holds an "@"`}},
		{"postgres://postgres:p4ss/w0rd?q#f@127.0.0.1:5432/test", []string{"not percent-encoded"}},
		{"postgresql://postgres:1234/s3cr3t@127.0.0.1:5432/test", []string{"not percent-encoded"}},
		{"mysql://root:p4ss/w0rd?q#f@tcp(127.0.0.1:3306)/test", []string{"not percent-encoded"}},
		{"root:p4ss/w0rd?q#f@tcp(127.0.0.1:3306)/test", []string{"go-sql-driver DSN", "mysql://user:pass@host:3306/db"}},
		{"tok3nonly@tcp(127.0.0.1:3306)/test", []string{"go-sql-driver DSN"}},
		{"p4ss/w0rd@localhost", []string{"not a database URL", "not shown"}},
		// Percent-encoded, the password reaches the server, which refuses it.
		{"mysql://root:p4ss%2Fw0rd%3Fq%23f%40s3cr3t@127.0.0.1:3306/test", []string{"cannot connect to mysql at 127.0.0.1:3306/test", "Access denied"}},
		{"postgres://postgres:p4ss%2Fw0rd%3Fq%23f%40s3cr3t@127.0.0.1:5433/test", []string{"cannot connect to postgres at 127.0.0.1:5433/test"}},
	} {
		t.Run(tc.dsn, func(t *testing.T) {
			t.Parallel()
			for _, args := range [][]string{{"stats", "--db", tc.dsn}, {"migrate", "--db", tc.dsn}, {"dead", "list", "--db", tc.dsn}} {
				r := runCLI(t, nil, args...)
				checkError(t, r, 1, tc.want...)
				noSecret(t, "outbox "+args[0], r.stdout+r.stderr, parts...)
			}
			r := runCLI(t, []string{"OUTBOX_DB=" + tc.dsn}, "relay", "--broker", "discard:")
			checkError(t, r, 1, tc.want...)
			noSecret(t, "outbox relay", r.stdout+r.stderr, parts...)
		})
	}
}

// rawControls are what a terminal acts on: C0 controls but line feed and
// tab, DEL, the C1 controls, and the bidirectional-text overrides.
func rawControls(s string) []string {
	var found []string
	for _, r := range s {
		if r < 0x20 && r != '\n' && r != '\t' || r >= 0x7f && r <= 0x9f || r >= 0x202a && r <= 0x202e {
			found = append(found, fmt.Sprintf("%U", r))
		}
	}
	return found
}

// TestOutputEscapesTerminalControls: msg_ids, topics, keys, headers,
// payloads and last_errors that hold escape sequences reach the terminal
// escaped in dead list, dead show and stats; --json stays valid JSON that
// decodes to the stored data.
func TestOutputEscapesTerminalControls(t *testing.T) {
	t.Parallel()
	const (
		msgID   = "esc\x1b]0;pwned\x07\u009b31m"
		topic   = "t\x1b[2J\x7f"
		key     = "k\u202etxt"
		lastErr = "boom \x1b[31mred\x1b[0m\r\nforged line \u0085\a"
	)
	payload := "{\"x\": \"\\u001b[31m\", \"c1\": \"\u009b1m\", \"del\": \"a\x7fb\", \"bidi\": \"\u202eabc\", \"text\": \"ünïcödé 日本\"}"
	headers := `{"h\u001b[1m": "v\u009b2J\u202e"}`
	eachBackend(t, true, func(t *testing.T, b *backend) {
		b.exec(t, "INSERT INTO outbox (msg_id, topic, msg_key, payload, headers) VALUES (?, ?, ?, ?, ?)", msgID, topic, key, payload, headers)
		b.exec(t, "UPDATE outbox SET status = 2, retries = 3, dead_at = created_at, last_error = ? WHERE msg_id = ?", lastErr, msgID)
		db := []string{"--db", b.dsn}
		for _, args := range [][]string{{"dead", "list"}, {"dead", "show", msgID}, {"stats"}, {"dead", "show", "no\x1b[2Jsuch"}} {
			r := runCLI(t, nil, append(args, db...)...)
			if bad := rawControls(r.stdout + r.stderr); len(bad) > 0 {
				t.Errorf("outbox %q prints raw %v:\n%q", args, bad, r.stdout+r.stderr)
			}
			if args[0] == "dead" && len(args) == 2 && !strings.Contains(r.stdout, `esc\x1b]0;pwned\x07\u009b31m`) {
				t.Errorf("outbox %q does not show the msg_id escaped:\n%s", args, r.stdout)
			}
		}
		r := mustRun(t, append([]string{"dead", "show", msgID}, db...)...)
		for _, want := range []string{`t\x1b[2J\x7f`, `k\u202etxt`, `boom \x1b[31mred\x1b[0m\r\nforged line \u0085\x07`,
			`h\x1b[1m: v\u009b2J\u202e`, `"c1": "\u009b1m"`, `ünïcödé 日本`} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("dead show lacks %q:\n%s", want, r.stdout)
			}
		}

		for _, args := range [][]string{{"dead", "show", msgID, "--json"}, {"dead", "list", "--json"}, {"stats", "--json"}} {
			r := mustRun(t, append(args, db...)...)
			if bad := rawControls(r.stdout); len(bad) > 0 {
				t.Errorf("outbox %q prints raw %v:\n%q", args, bad, r.stdout)
			}
			if !json.Valid([]byte(r.stdout)) {
				t.Fatalf("outbox %q is not valid JSON:\n%s", args, r.stdout)
			}
		}
		r = mustRun(t, append([]string{"dead", "show", msgID, "--json"}, db...)...)
		var m admin.Message
		if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
			t.Fatal(err)
		}
		if m.MsgID != msgID || m.Topic != topic || m.Key != key || m.LastError != lastErr ||
			!reflect.DeepEqual(m.Headers, map[string]string{"h\x1b[1m": "v\u009b2J\u202e"}) {
			t.Errorf("dead show --json does not hold the stored data: %+v", m)
		}
		var got, want map[string]string
		if err := json.Unmarshal(m.Payload, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(payload), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("payload %q, want %q", got, want)
		}
		r = mustRun(t, append([]string{"stats", "--json"}, db...)...)
		var st admin.Stats
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Topics) != 1 || st.Topics[0].Topic != topic {
			t.Errorf("stats --json (%v): %+v", err, st)
		}
	})
}

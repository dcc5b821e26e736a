package main

import (
	"context"
	"encoding/json"
	"github.com/outbox-go/outbox/cmd/outbox/internal/clitest"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/admin"
)

var adminURL = regexp.MustCompile(`url=(http://\S+/admin)/stats`)

// adminCall sends one request to the relay's admin API and returns the
// status and the body.
func adminCall(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(raw)
}

// TestRelayAdmin runs a relay with --admin-addr on a free port, with a
// token and --admin-writable from the environment, on every database: the
// API reads the table, a DEAD message retried through it is published by the
// same relay, and SIGTERM stops the server with the relay.
func TestRelayAdmin(t *testing.T) {
	t.Parallel()
	eachBackend(t, true, func(t *testing.T, b *backend) {
		for _, id := range []string{"order-1:OrderPaid", "order-2:OrderPaid", "order-3:OrderPaid"} {
			b.insert(t, id, "order.paid", `{"order":1}`)
		}
		// A row an operator parked by hand, before the relay starts.
		b.exec(t, "UPDATE outbox SET status = 2, retries = 10, last_error = 'broker said no' WHERE msg_id = 'order-3:OrderPaid'")
		const token = "admin-s3cret-t0ken"
		var stderr func() string
		stop := startRelayLogged(t, &stderr, []string{"OUTBOX_ADMIN_ADDR=127.0.0.1:0", "OUTBOX_ADMIN_TOKEN=" + token, "OUTBOX_ADMIN_WRITABLE=true"},
			"--db", b.dsn, "--broker", "discard:", "--interval", "50ms")
		base := urlInLog(t, stderr, adminURL)
		if strings.Contains(stderr(), token) {
			t.Fatalf("the relay logged the admin token:\n%s", stderr())
		}
		if code, body := adminCall(t, "GET", base+"/stats", "", ""); code != http.StatusUnauthorized {
			t.Fatalf("GET /admin/stats without the token: %d %s", code, body)
		}
		waitFor(t, "two rows SENT", 30*time.Second, func() bool { return b.count(t, "status = 1") == 2 })
		code, body := adminCall(t, "GET", base+"/stats", token, "")
		var st admin.Stats
		if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 || st.Sent != 2 || st.Dead != 1 || st.Pending != 0 ||
			len(st.Topics) != 1 || st.Table != "outbox" {
			t.Fatalf("GET /admin/stats: %d %s", code, body)
		}
		code, body = adminCall(t, "GET", base+"/messages?status=dead", token, "")
		var dead admin.MessageList
		if err := json.Unmarshal([]byte(body), &dead); err != nil || code != 200 || len(dead.Messages) != 1 ||
			dead.Messages[0].MsgID != "order-3:OrderPaid" || dead.Messages[0].LastError != "broker said no" {
			t.Fatalf("GET /admin/messages?status=dead: %d %s", code, body)
		}
		code, body = adminCall(t, "POST", base+"/dead/retry", token, `{"msg_ids":["order-3:OrderPaid"]}`)
		if code != 200 || body != `{"retried":1}`+"\n" {
			t.Fatalf("POST /admin/dead/retry: %d %s", code, body)
		}
		waitFor(t, "the retried row SENT by the relay", 30*time.Second, func() bool { return b.status(t, "order-3:OrderPaid") == 1 })
		code, body = adminCall(t, "GET", base+"/messages/order-3:OrderPaid", token, "")
		var m admin.Message
		if err := json.Unmarshal([]byte(body), &m); err != nil || code != 200 || m.Status != "SENT" || string(m.Payload) != `{"order": 1}` && string(m.Payload) != `{"order":1}` ||
			!strings.Contains(m.LastError, "via the admin handler") {
			t.Fatalf("GET /admin/messages/order-3:OrderPaid: %d %s", code, body)
		}
		if !strings.Contains(stderr(), "DEAD messages retried") || !strings.Contains(stderr(), "msg_ids=order-3:OrderPaid") {
			t.Errorf("the retry was not logged:\n%s", stderr())
		}
		if r := stop(); r.code != 0 {
			t.Fatalf("relay after SIGTERM: %s", r)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/stats", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("the admin server still answers after the relay stopped: %s", resp.Status)
		}
	})
}

// TestRelayAdminReadOnly: without --admin-writable the API reads, and a
// retry or a drop is refused with nothing changed.
func TestRelayAdminReadOnly(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + t.TempDir() + "/outbox.db"
	mustRun(t, "migrate", "--db", dsn)
	var stderr func() string
	stop := startRelayLogged(t, &stderr, nil, "--db", dsn, "--broker", "discard:", "--admin-addr", "127.0.0.1:0")
	base := urlInLog(t, stderr, adminURL)
	if code, body := adminCall(t, "GET", base+"/backlog", "", ""); code != 200 || !strings.Contains(body, `"pending":0`) {
		t.Fatalf("GET /admin/backlog: %d %s", code, body)
	}
	for _, path := range []string{"/dead/retry", "/dead/drop"} {
		if code, body := adminCall(t, "POST", base+path, "", `{"all":true,"yes":true}`); code != http.StatusForbidden || !strings.Contains(body, "--admin-writable") {
			t.Fatalf("POST /admin%s on a read-only relay: %d %s", path, code, body)
		}
	}
	if r := stop(); r.code != 0 {
		t.Fatalf("relay after SIGTERM: %s", r)
	}
}

func TestRelayAdminAndCleanupFlagErrors(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:" + t.TempDir() + "/outbox.db"
	relay := []string{"relay", "--db", sqlite, "--broker", "discard:"}
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"writable without a token", nil, append(relay, "--admin-addr", ":0", "--admin-writable"),
			[]string{"--admin-writable", "--admin-token"}},
		{"a token without an address", []string{"OUTBOX_ADMIN_TOKEN=x"}, relay,
			[]string{"need --admin-addr"}},
		{"the metrics' address", nil, append(relay, "--admin-addr", "127.0.0.1:9999", "--metrics-addr", "127.0.0.1:9999"),
			[]string{"both 127.0.0.1:9999", "its own port"}},
		{"no port", nil, append(relay, "--admin-addr", "localhost"),
			[]string{`--admin-addr "localhost"`, "use HOST:PORT or :PORT"}},
		{"a negative cleanup age", nil, append(relay, "--cleanup-older-than", "-1h"),
			[]string{"--cleanup-older-than -1h0m0s is negative"}},
		{"a negative inbox cleanup age", nil, append(relay, "--cleanup-inbox-older-than", "-1s"),
			[]string{"--cleanup-inbox-older-than -1s is negative"}},
		{"no cleanup interval", nil, append(relay, "--cleanup-interval", "0s"),
			[]string{"--cleanup-interval 0s must be positive"}},
		{"a cleanup duty cycle above 1", nil, append(relay, "--cleanup-duty-cycle", "1.5"),
			[]string{"--cleanup-duty-cycle 1.5 is out of range"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			checkError(t, runCLI(t, c.env, c.args...), 2, c.want...)
		})
	}
}

// TestRelayCleanup: with --cleanup-older-than the relay deletes the SENT
// rows once they are old enough, and leaves the DEAD one; with
// --cleanup-inbox-older-than, the old inbox records; --metrics-addr counts
// them.
func TestRelayCleanup(t *testing.T) {
	t.Parallel()
	eachBackend(t, true, func(t *testing.T, b *backend) {
		for _, id := range []string{"a", "b", "c", "parked"} {
			b.insert(t, id, "order.paid", `{}`)
		}
		b.exec(t, "UPDATE outbox SET status = 2 WHERE msg_id = 'parked'")
		b.exec(t, "INSERT INTO consumed_msg (consumer_group, msg_id) VALUES ('g', 'old'), ('g', 'recent')")
		b.exec(t, "UPDATE consumed_msg SET consumed_at = "+b.tenDaysAgo+" WHERE msg_id = 'old'")
		var stderr func() string
		stop := startRelayLogged(t, &stderr, []string{"OUTBOX_CLEANUP_OLDER_THAN=1s"},
			"--db", b.dsn, "--broker", "discard:", "--interval", "50ms", "--cleanup-interval", "200ms", "--cleanup-duty-cycle", "0.5", "--cleanup-inbox-older-than", "168h",
			"--metrics-addr", "127.0.0.1:0")
		metrics := urlInLog(t, stderr, metricsURL)
		waitFor(t, "the SENT rows deleted", 30*time.Second, func() bool { return b.count(t, "1 = 1") == 1 })
		if b.status(t, "parked") != 2 {
			t.Fatal("the DEAD row is gone")
		}
		waitFor(t, "the old inbox record deleted", 30*time.Second, func() bool {
			return b.queryInt(t, "SELECT count(*) FROM consumed_msg WHERE msg_id = 'old'") == 0
		})
		if n := b.queryInt(t, "SELECT count(*) FROM consumed_msg WHERE msg_id = 'recent'"); n != 1 {
			t.Fatal("the recent inbox record is gone")
		}
		if !strings.Contains(stderr(), "deleted old rows") || !strings.Contains(stderr(), "sent=3") {
			t.Errorf("the cleanup was not logged:\n%s", stderr())
		}
		var body string
		waitFor(t, "the cleanup counted in the metrics", 30*time.Second, func() bool {
			body = clitest.Scrape(t, metrics)
			return strings.Contains(body, `outbox_cleanup_deleted_rows_total{rows="consumed"} 1`) &&
				strings.Contains(body, `outbox_cleanup_deleted_rows_total{rows="sent"} 3`)
		})
		for _, want := range []string{`outbox_cleanup_deleted_rows_total{rows="sent"} 3`, `outbox_cleanup_deleted_rows_total{rows="consumed"} 1`,
			`outbox_cleanup_rounds_total{result="failed"} 0`, "\noutbox_cleanup_last_success_timestamp_seconds "} {
			if !strings.Contains(body, want) {
				t.Errorf("the metrics lack %q:\n%s", want, body)
			}
		}
		if r := stop(); r.code != 0 {
			t.Fatalf("relay after SIGTERM: %s", r)
		}
	})
}

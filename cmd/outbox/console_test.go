package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestAdminSafeDefaults: the relay and the console refuse to serve
// payloads without a token on an address that is not loopback, unless told
// to, and say what to do.
func TestAdminSafeDefaults(t *testing.T) {
	t.Parallel()
	sqlite := "sqlite:" + t.TempDir() + "/outbox.db"
	relay := []string{"relay", "--db", sqlite, "--broker", "discard:"}
	con := []string{"console", "--db", sqlite}
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte("# who may open the console\nalice short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const long = "OUTBOX_ADMIN_TOKEN=0123456789abcdef-long"
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"relay: every interface without a token", nil, append(relay, "--admin-addr", ":0"),
			[]string{"--admin-addr :0 would serve message payloads", "--admin-token-file", "OUTBOX_ADMIN_TOKEN", "--admin-auth-header", "127.0.0.1:PORT", "--admin-insecure"}},
		{"relay: a public address without a token", nil, append(relay, "--admin-addr", "0.0.0.0:0"),
			[]string{"--admin-addr 0.0.0.0:0 would serve message payloads"}},
		{"console: every interface without a token", nil, append(con, "--addr", ":8080"),
			[]string{"console: --addr :8080 would serve message payloads", "--admin-insecure"}},
		{"a short token", []string{"OUTBOX_ADMIN_TOKEN=short"}, append(relay, "--admin-addr", "127.0.0.1:0"),
			[]string{"is 5 characters long; give 16 or more"}},
		{"writable on loopback without a token", nil, append(con, "--addr", "127.0.0.1:0", "--admin-writable"),
			[]string{"--admin-writable lets any caller delete DEAD messages", "--admin-token-file"}},
		{"a token and the proxy's header", []string{long}, append(con, "--admin-auth-header", "X-Forwarded-User"),
			[]string{"either --admin-auth-header"}},
		{"a bad header name", nil, append(con, "--admin-auth-header", "X Forwarded: User"),
			[]string{"is not a header name"}},
		{"insecure without an address", nil, append(relay, "--admin-insecure"),
			[]string{"need --admin-addr"}},
		{"a sample interval too short", nil, append(con, "--sample-interval", "1ms"),
			[]string{"--sample-interval 1ms is too short"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			checkError(t, runCLI(t, c.env, c.args...), 2, c.want...)
		})
	}
	mustRun(t, "migrate", "--db", sqlite)
	r := runCLI(t, nil, "console", "--db", sqlite, "--addr", "127.0.0.1:0", "--admin-token-file", tokenFile)
	checkError(t, r, 1, "the token on line 2 is 5 characters long")
	if strings.Contains(r.stderr, "short") {
		t.Errorf("the error shows the token:\n%s", r.stderr)
	}
}

var consoleLogURL = regexp.MustCompile(`msg="serving the console" url=(http://\S+)/`)

// TestRelayServesTheConsole: outbox relay --admin-addr serves the console
// and the JSON API behind the same tokens (a file of named ones here); the
// console counts what the relay sends for its rates; every write names its
// token; --admin-insecure serves on every interface, with a warning.
func TestRelayServesTheConsole(t *testing.T) {
	t.Parallel()
	eachBackend(t, true, func(t *testing.T, b *backend) {
		for _, id := range []string{"a", "b", "c"} {
			b.insert(t, id, "order.paid", `{"n":1}`)
		}
		b.exec(t, "UPDATE outbox SET status = 2, retries = 10, last_error = 'broker said no' WHERE msg_id = 'c'")
		tokens := filepath.Join(t.TempDir(), "tokens")
		const alice, bob = "alice-t0ken-0123456789", "bob-t0ken-0123456789"
		if err := os.WriteFile(tokens, []byte("alice "+alice+"\nbob "+bob+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var stderr func() string
		stop := startRelayLogged(t, &stderr, []string{"OUTBOX_ADMIN_TOKEN_FILE=" + tokens},
			"--db", b.dsn, "--broker", "discard:", "--interval", "50ms", "--admin-addr", "127.0.0.1:0", "--admin-writable")
		base := urlInLog(t, stderr, consoleLogURL)
		if code, body := adminCall(t, "GET", base+"/", "", ""); code != 200 || !strings.Contains(body, "outbox console") {
			t.Fatalf("GET /: %d", code)
		}
		for _, path := range []string{"/api/dead", "/admin/stats", "/admin/messages/c"} {
			if code, body := adminCall(t, "GET", base+path, "", ""); code != http.StatusUnauthorized || strings.Contains(body, "broker said no") {
				t.Fatalf("GET %s without a token: %d %s", path, code, body)
			}
		}
		if code, body := adminCall(t, "GET", base+"/admin/messages/c", bob, ""); code != 200 || !strings.Contains(body, "broker said no") {
			t.Fatalf("GET /admin/messages/c with bob's token: %d %s", code, body)
		}
		waitFor(t, "the console's rates from the relay", 30*time.Second, func() bool {
			_, body := adminCall(t, "GET", base+"/api/backlog", alice, "")
			var b struct {
				Rates string `json:"rates"`
			}
			return json.Unmarshal([]byte(body), &b) == nil && b.Rates == "relay"
		})
		if code, body := adminCall(t, "POST", base+"/api/dead/retry", alice, `{"msg_ids":["c"]}`); code != 200 || !strings.Contains(body, `"retried":1`) {
			t.Fatalf("retry through the console with alice's token: %d %s", code, body)
		}
		waitFor(t, "the retried message sent", 30*time.Second, func() bool { return b.status(t, "c") == 1 })
		waitFor(t, "the retry logged with alice's name", 10*time.Second, func() bool {
			return strings.Contains(stderr(), `msg="outbox console: DEAD messages retried" who=alice via=token done=1 selected=1 msg_ids=c`)
		})
		if code, body := adminCall(t, "POST", base+"/admin/dead/drop", bob, `{"all":true,"yes":true}`); code != 200 {
			t.Errorf("a drop through the JSON API: %d %s", code, body)
		}
		// The log reaches the test through a pipe, after the answer maybe.
		waitFor(t, "the JSON API's drop logged with bob's name", 10*time.Second, func() bool {
			return strings.Contains(stderr(), `msg="outbox admin: write request" who=bob via=token method=POST path=/admin/dead/drop`)
		})
		for _, tok := range []string{alice, bob} {
			if strings.Contains(stderr(), tok) {
				t.Fatalf("the relay logged a token:\n%s", stderr())
			}
		}
		if r := stop(); r.code != 0 {
			t.Fatalf("relay after SIGTERM: %s", r)
		}
	})
}

func TestConsoleInsecure(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + t.TempDir() + "/outbox.db"
	mustRun(t, "migrate", "--db", dsn)
	url, log := startConsole(t, nil, "--db", dsn, "--addr", ":0", "--admin-insecure")
	waitFor(t, "the warning about serving without a token", 10*time.Second, func() bool {
		return strings.Contains(log(), "serve message payloads without a token") && strings.Contains(log(), "why=--admin-insecure")
	})
	url = strings.Replace(url, "[::]", "127.0.0.1", 1)
	if code, body := adminCall(t, "GET", url+"/api/session", "", ""); code != 200 || !strings.Contains(body, `"user":"anonymous"`) {
		t.Fatalf("GET /api/session: %d %s", code, body)
	}
	if code, _ := adminCall(t, "GET", url+"/readyz", "", ""); code != 200 {
		t.Fatalf("GET /readyz: %d", code)
	}
}

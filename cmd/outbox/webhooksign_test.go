package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox/webhook"
)

// TestRelayWebhookSignatures runs a relay whose secrets come from the
// environment and from --webhook-secret-file (two, as in a rotation): every
// request it sends verifies under each secret, carries the legacy header
// with --webhook-legacy-signature, and no secret reaches the log.
func TestRelayWebhookSignatures(t *testing.T) {
	t.Parallel()
	const envSecret, oldSecret, newSecret = "env-s3cret-value", "whsec_b2xkLXNlY3JldA==", "new-s3cret-value"
	var mu sync.Mutex
	var failures []string
	verified := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		for _, s := range []string{envSecret, oldSecret, newSecret} {
			if err := webhook.Verify([]string{s}, r.Header, body, 0); err != nil {
				failures = append(failures, s+": "+err.Error())
			}
		}
		if !webhook.VerifyLegacy(envSecret, body, r.Header.Get(webhook.DefaultSignatureHeader)) {
			failures = append(failures, "legacy header "+r.Header.Get(webhook.DefaultSignatureHeader))
		}
		verified++
	}))
	t.Cleanup(srv.Close)
	file := filepath.Join(t.TempDir(), "secrets")
	if err := os.WriteFile(file, []byte("# rotation: old, then new\n"+oldSecret+"\n\n"+newSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := newSQLite(t)
	mustRun(t, "migrate", "--db", b.dsn)
	for _, id := range []string{"a", `id "2" 100% é`, "c"} {
		b.insert(t, id, "order.paid", `{"x":1}`)
	}
	var stderr func() string
	stop := startRelayLogged(t, &stderr, []string{"OUTBOX_WEBHOOK_SECRET=" + envSecret, "OUTBOX_WEBHOOK_SECRET_FILE=" + file},
		"--db", b.dsn, "--broker", srv.URL+"/hook", "--interval", "50ms", "--webhook-legacy-signature", "--log-level", "debug")
	waitFor(t, "every message SENT", 30*time.Second, func() bool { return b.count(t, "status = 1") == 3 })
	r := stop()
	if r.code != 0 {
		t.Fatalf("relay: %s", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if verified < 3 || len(failures) > 0 {
		t.Errorf("%d requests; failures: %s", verified, strings.Join(failures, "\n"))
	}
	noSecret(t, "the relay's log", r.stderr, envSecret, oldSecret, newSecret)
}

func TestRelayWebhookSecretErrors(t *testing.T) {
	t.Parallel()
	b := newSQLite(t)
	mustRun(t, "migrate", "--db", b.dsn)
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("# nothing\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	relay := []string{"relay", "--db", b.dsn, "--broker", "http://127.0.0.1:1/hook"}
	checkError(t, runCLI(t, nil, append(relay, "--webhook-secret-file", filepath.Join(t.TempDir(), "missing"))...), 1,
		"--webhook-secret-file", "no such file")
	checkError(t, runCLI(t, nil, append(relay, "--webhook-secret-file", empty)...), 1, "holds no secret")
	checkError(t, runCLI(t, nil, append(relay, "--webhook-legacy-signature")...), 2, "--webhook-legacy-signature needs --webhook-secret")
	r := runCLI(t, []string{"OUTBOX_WEBHOOK_SECRET=whsec_n0t-base64!s3cret"}, relay...)
	checkError(t, r, 1, "Config.Secret", "whsec_ followed by base64")
	noSecret(t, "the error", r.stderr, "n0t-base64!s3cret")
}

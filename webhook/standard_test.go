package webhook_test

import (
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/webhook"
)

// signed returns the headers of a request signed with secrets at ts.
func signed(t *testing.T, id string, ts time.Time, body []byte, secrets ...string) http.Header {
	t.Helper()
	h := http.Header{}
	h.Set(webhook.HeaderID, id)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	var sigs []string
	for _, s := range secrets {
		sig, err := webhook.Sign(s, id, ts, body)
		if err != nil {
			t.Fatal(err)
		}
		sigs = append(sigs, sig)
	}
	h.Set(webhook.HeaderSignature, strings.Join(sigs, " "))
	return h
}

// TestSignStandardWebhooksVector checks Sign against the example of the
// Standard Webhooks specification's reference libraries.
func TestSignStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	got, err := webhook.Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
		time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

func TestVerifyStandard(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"amount":42}`)
	now := time.Now()
	fresh := signed(t, "order-42:OrderPaid", now, body, secret)
	if err := webhook.Verify([]string{secret}, fresh, body, 0); err != nil {
		t.Fatalf("a fresh request: %v", err)
	}

	// A replay: the request as it was sent 10 minutes ago.
	old := signed(t, "order-42:OrderPaid", now.Add(-10*time.Minute), body, secret)
	if err := webhook.Verify([]string{secret}, old, body, 0); !errors.Is(err, webhook.ErrTimestampOutOfTolerance) {
		t.Errorf("a replayed request: %v, want ErrTimestampOutOfTolerance", err)
	}
	// Accepted with a tolerance that covers it.
	if err := webhook.Verify([]string{secret}, old, body, 15*time.Minute); err != nil {
		t.Errorf("an old request within a 15m tolerance: %v", err)
	}
	// Re-timed: the old request with a fresh timestamp and its old signature.
	retimed := old.Clone()
	retimed.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	if err := webhook.Verify([]string{secret}, retimed, body, 0); !errors.Is(err, webhook.ErrSignatureMismatch) {
		t.Errorf("a re-timed request: %v, want ErrSignatureMismatch", err)
	}
	// From the future beyond the tolerance.
	future := signed(t, "order-42:OrderPaid", now.Add(time.Hour), body, secret)
	if err := webhook.Verify([]string{secret}, future, body, 0); !errors.Is(err, webhook.ErrTimestampOutOfTolerance) {
		t.Errorf("a request from the future: %v, want ErrTimestampOutOfTolerance", err)
	}

	for _, tc := range []struct {
		name    string
		secrets []string
		mutate  func(h http.Header)
		body    string
		want    error
	}{
		{"tampered body", []string{secret}, nil, `{"amount":43}`, webhook.ErrSignatureMismatch},
		{"wrong secret", []string{"whsec_" + base64.StdEncoding.EncodeToString([]byte("other"))}, nil, "", webhook.ErrSignatureMismatch},
		{"other id", []string{secret}, func(h http.Header) { h.Set(webhook.HeaderID, "order-43:OrderPaid") }, "", webhook.ErrSignatureMismatch},
		{"no signature header", []string{secret}, func(h http.Header) { h.Del(webhook.HeaderSignature) }, "", webhook.ErrMissingHeader},
		{"no id", []string{secret}, func(h http.Header) { h.Del(webhook.HeaderID) }, "", webhook.ErrMissingHeader},
		{"timestamp not a number", []string{secret}, func(h http.Header) { h.Set(webhook.HeaderTimestamp, "soon") }, "", webhook.ErrInvalidTimestamp},
		{"other scheme only", []string{secret}, func(h http.Header) { h.Set(webhook.HeaderSignature, "v1a,abc") }, "", webhook.ErrSignatureMismatch},
		{"no secret", nil, nil, "", webhook.ErrInvalidSecret},
		{"bad whsec secret", []string{"whsec_!!"}, nil, "", webhook.ErrInvalidSecret},
	} {
		h := fresh.Clone()
		if tc.mutate != nil {
			tc.mutate(h)
		}
		b := body
		if tc.body != "" {
			b = []byte(tc.body)
		}
		if err := webhook.Verify(tc.secrets, h, b, 0); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestVerifyRotation: during a rotation the sender signs with both secrets
// and a receiver that knows either accepts the request.
func TestVerifyRotation(t *testing.T) {
	t.Parallel()
	const oldSecret, newSecret = "old-raw-secret", "whsec_bmV3LXNlY3JldC1ieXRlcw=="
	body := []byte(`{}`)
	h := signed(t, "m1", time.Now(), body, oldSecret, newSecret)
	if n := len(strings.Fields(h.Get(webhook.HeaderSignature))); n != 2 {
		t.Fatalf("%d signatures, want 2", n)
	}
	for _, secrets := range [][]string{{oldSecret}, {newSecret}, {"unrelated", newSecret}} {
		if err := webhook.Verify(secrets, h, body, 0); err != nil {
			t.Errorf("Verify with %v: %v", secrets, err)
		}
	}
	if err := webhook.Verify([]string{"unrelated"}, h, body, 0); !errors.Is(err, webhook.ErrSignatureMismatch) {
		t.Errorf("Verify with an unrelated secret: %v", err)
	}
	// A raw secret and its whsec_ form are the same key.
	raw := signed(t, "m1", time.Now(), body, "new-secret-bytes")
	if err := webhook.Verify([]string{newSecret}, raw, body, 0); err != nil {
		t.Errorf("whsec_ form of a raw secret: %v", err)
	}
}

func TestVerifier(t *testing.T) {
	t.Parallel()
	const secret = "s3cret"
	var got string
	h := webhook.Verifier([]string{secret}, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
	}))
	body := `{"a":1}`
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	req.Header = signed(t, "m1", time.Now(), []byte(body), secret)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 || got != body {
		t.Errorf("a signed request: %d, handler saw %q", rec.Code, got)
	}
	got = ""
	req = httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	req.Header = signed(t, "m1", time.Now().Add(-time.Hour), []byte(body), secret)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized || got != "" || !strings.Contains(rec.Body.String(), "tolerance") {
		t.Errorf("a replayed request: %d %q, handler saw %q", rec.Code, rec.Body.String(), got)
	}
}

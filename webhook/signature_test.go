package webhook_test

import (
	"strings"
	"testing"

	"github.com/outbox-go/outbox/webhook"
)

func TestSignKnownVector(t *testing.T) {
	t.Parallel()
	// RFC 4231-style check against a widely published HMAC-SHA256 value.
	got := webhook.SignLegacy("key", []byte("The quick brown fox jumps over the lazy dog"))
	want := "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
	if got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"amount":42}`)
	sig := webhook.SignLegacy("s3cret", body)
	for _, tc := range []struct {
		name   string
		secret string
		body   string
		header string
		want   bool
	}{
		{"valid", "s3cret", string(body), sig, true},
		{"upper-case hex", "s3cret", string(body), "sha256=" + strings.ToUpper(sig[7:]), true},
		{"surrounding space", "s3cret", string(body), " " + sig + " ", true},
		{"tampered body", "s3cret", `{"amount":43}`, sig, false},
		{"re-encoded body", "s3cret", `{"amount": 42}`, sig, false},
		{"wrong secret", "other", string(body), sig, false},
		{"empty secret", "", string(body), webhook.SignLegacy("", body), false},
		{"missing prefix", "s3cret", string(body), sig[7:], false},
		{"other algorithm", "s3cret", string(body), "sha1=" + sig[7:], false},
		{"truncated", "s3cret", string(body), sig[:len(sig)-2], false},
		{"not hex", "s3cret", string(body), "sha256=" + strings.Repeat("zz", 32), false},
		{"empty", "s3cret", string(body), "", false},
	} {
		if got := webhook.VerifyLegacy(tc.secret, []byte(tc.body), tc.header); got != tc.want {
			t.Errorf("%s: Verify = %v, want %v", tc.name, got, tc.want)
		}
	}
}

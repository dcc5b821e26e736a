package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of the Standard Webhooks signature scheme
// (https://www.standardwebhooks.com), which the publisher sends when
// Config.Secret or Config.Secrets is set.
const (
	// HeaderID carries the message's msg_id, percent-encoded as in
	// Idempotency-Key.
	HeaderID = "Webhook-Id"
	// HeaderTimestamp carries the time the request was signed, in seconds
	// since the Unix epoch. Each attempt is signed anew.
	HeaderTimestamp = "Webhook-Timestamp"
	// HeaderSignature carries "v1,<base64 HMAC-SHA256>" per secret,
	// separated by spaces.
	HeaderSignature = "Webhook-Signature"
)

// DefaultTolerance is how far a request's timestamp may be from the
// receiver's clock, either way, when Verify is given a tolerance of 0.
const DefaultTolerance = 5 * time.Minute

// secretPrefix marks a secret given as base64, as Standard Webhooks
// libraries print them.
const secretPrefix = "whsec_"

// Errors of Verify and ParseSecret; the returned errors wrap one of them,
// for errors.Is.
var (
	// ErrInvalidSecret: a secret is empty, or starts with "whsec_" and the
	// rest is not base64.
	ErrInvalidSecret = errors.New("webhook: invalid secret")
	// ErrMissingHeader: the request lacks webhook-id, webhook-timestamp or
	// webhook-signature.
	ErrMissingHeader = errors.New("webhook: missing signature header")
	// ErrInvalidTimestamp: webhook-timestamp is not a number of seconds.
	ErrInvalidTimestamp = errors.New("webhook: invalid webhook-timestamp")
	// ErrTimestampOutOfTolerance: the request was signed too long ago (a
	// replay) or too far in the future.
	ErrTimestampOutOfTolerance = errors.New("webhook: webhook-timestamp outside the tolerance")
	// ErrSignatureMismatch: no v1 signature of the request matches any of
	// the secrets (a forged, altered or re-timed request).
	ErrSignatureMismatch = errors.New("webhook: no signature matches")
)

// ParseSecret returns the key bytes of secret: the base64-decoded rest of a
// secret written "whsec_<base64>", else the secret's own bytes.
func ParseSecret(secret string) ([]byte, error) {
	if secret == "" {
		return nil, fmt.Errorf("%w: the secret is empty", ErrInvalidSecret)
	}
	enc, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("%w: a secret starting with %q must continue in base64", ErrInvalidSecret, secretPrefix)
	}
	return key, nil
}

// Sign returns the Standard Webhooks signature of body, sent with id (the
// value of webhook-id) at ts, under secret (raw or "whsec_<base64>"):
// "v1," followed by the base64 HMAC-SHA256 of "id.timestamp.body".
func Sign(secret, id string, ts time.Time, body []byte) (string, error) {
	key, err := ParseSecret(secret)
	if err != nil {
		return "", err
	}
	return signV1(key, id, strconv.FormatInt(ts.Unix(), 10), body), nil
}

func signV1(key []byte, id, ts string, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(macV1(key, id, ts, body))
}

func macV1(key []byte, id, ts string, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return mac.Sum(nil)
}

// Verify checks a request's Standard Webhooks signature: h holds its
// headers and body its raw body, read before any parsing. It accepts the
// request when webhook-timestamp is within tolerance of the clock, either
// way (0 means DefaultTolerance), and one of the v1 signatures in
// webhook-signature matches one of secrets (raw or "whsec_<base64>"):
// during a rotation, give both the old and the new secret. The comparisons
// take constant time. Otherwise the error wraps ErrMissingHeader,
// ErrInvalidTimestamp, ErrTimestampOutOfTolerance, ErrSignatureMismatch or
// ErrInvalidSecret. A receiver should also drop a webhook-id it has
// processed: within the tolerance, the same request may be sent again.
func Verify(secrets []string, h http.Header, body []byte, tolerance time.Duration) error {
	return verifyAt(time.Now(), secrets, h, body, tolerance)
}

func verifyAt(now time.Time, secrets []string, h http.Header, body []byte, tolerance time.Duration) error {
	if len(secrets) == 0 {
		return fmt.Errorf("%w: no secret given", ErrInvalidSecret)
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		k, err := ParseSecret(s)
		if err != nil {
			return err
		}
		keys[i] = k
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	for _, v := range [][2]string{{HeaderID, id}, {HeaderTimestamp, ts}, {HeaderSignature, sigs}} {
		if v[1] == "" {
			return fmt.Errorf("%w: %s", ErrMissingHeader, strings.ToLower(v[0]))
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not a number of seconds", ErrInvalidTimestamp, ts)
	}
	signed := time.Unix(sec, 0)
	if d := now.Sub(signed); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed at %s, %s from now, beyond %s", ErrTimestampOutOfTolerance,
			signed.UTC().Format(time.RFC3339), d.Round(time.Second), tolerance)
	}
	macs := make([][]byte, len(keys))
	for i, k := range keys {
		macs[i] = macV1(k, id, ts, body)
	}
	for _, sig := range strings.Fields(sigs) {
		b64, ok := strings.CutPrefix(sig, "v1,")
		if !ok {
			continue // another scheme's signature
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		for _, m := range macs {
			if hmac.Equal(got, m) {
				return nil
			}
		}
	}
	return ErrSignatureMismatch
}

// DefaultMaxBody is the largest body Verifier reads.
const DefaultMaxBody = 10 << 20

// Verifier returns a handler that verifies each request with Verify before
// passing it to next, with its body intact. A request that fails gets 401
// with the reason (400 for a body over DefaultMaxBody bytes), and next never
// sees it.
func Verifier(secrets []string, tolerance time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, DefaultMaxBody))
		if err != nil {
			http.Error(w, "webhook: cannot read the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := Verify(secrets, r.Header, body, tolerance); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

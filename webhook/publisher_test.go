package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/webhook"
)

// request is what the test server saw of one POST.
type request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// testBundle is a real HTTP server that records every request and answers
// with handler (200 when handler is nil), plus a publisher pointed at it.
type testBundle struct {
	srv *httptest.Server
	pub *webhook.Publisher

	mu   sync.Mutex
	reqs []request
}

// setup starts a server and a publisher; cfg.URL is filled in with the
// server's address plus "/hook" when it is empty.
func setup(t *testing.T, cfg webhook.Config, handler http.HandlerFunc) *testBundle {
	t.Helper()
	b := &testBundle{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("server: reading body: %v", err)
		}
		b.mu.Lock()
		b.reqs = append(b.reqs, request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		b.mu.Unlock()
		if handler != nil {
			handler(w, r)
		}
	}))
	t.Cleanup(b.srv.Close)
	if cfg.URL == "" {
		cfg.URL = b.srv.URL + "/hook"
	}
	b.pub = newPublisher(t, cfg)
	return b
}

func newPublisher(t *testing.T, cfg webhook.Config) *webhook.Publisher {
	t.Helper()
	p, err := webhook.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func (b *testBundle) requests() []request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]request(nil), b.reqs...)
}

func msg(id string) outbox.Message {
	return outbox.Message{MsgID: id, Topic: "order.paid", Payload: json.RawMessage(`{"id":"` + id + `"}`)}
}

func TestPublishWireFormat(t *testing.T) {
	t.Parallel()
	const secret = "s3cret"
	b := setup(t, webhook.Config{
		Source:          "https://shop.example/orders",
		Secret:          secret,
		LegacySignature: true,
		Header:          http.Header{"Authorization": {"Bearer token-1"}},
	}, nil)

	created := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.FixedZone("CEST", 2*3600))
	// Odd spacing and key order: the body must arrive byte for byte.
	payload := json.RawMessage("{ \"amount\" : 42,\n  \"currency\":\"EUR\" }")
	m := outbox.Message{
		MsgID:     "order-42:OrderPaid",
		Topic:     "order.paid",
		Key:       "order-42",
		Payload:   payload,
		CreatedAt: created,
		Headers: map[string]string{
			"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			"Trace-State": "vendor=1",        // sidecar-style name: lower-cased, '-' dropped
			"tenant":      "Zürich office",   // non-ASCII and space: percent-encoded
			"id":          "must not shadow", // reserved: skipped
			"Type":        "must not shadow", // reserved after lower-casing: skipped
			"--":          "nothing left",    // empty after normalising: skipped
		},
	}
	if errs := b.pub.Publish(t.Context(), []outbox.Message{m}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}

	reqs := b.requests()
	if len(reqs) != 1 {
		t.Fatalf("server saw %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Method != http.MethodPost || r.Path != "/hook" {
		t.Errorf("request = %s %s, want POST /hook", r.Method, r.Path)
	}
	if string(r.Body) != string(payload) {
		t.Errorf("body = %q, want the payload unchanged %q", r.Body, payload)
	}
	want := map[string]string{
		"Content-Type":           "application/json",
		"Ce-Specversion":         "1.0",
		"Ce-Id":                  "order-42:OrderPaid",
		"Ce-Type":                "order.paid",
		"Ce-Source":              "https://shop.example/orders",
		"Ce-Time":                "2024-05-06T05:08:09.123456789Z",
		"Ce-Partitionkey":        "order-42",
		"Ce-Traceparent":         "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"Ce-Tracestate":          "vendor=1",
		"Ce-Tenant":              "Z%C3%BCrich%20office",
		"Idempotency-Key":        "order-42:OrderPaid",
		"Authorization":          "Bearer token-1",
		"X-Outbox-Signature-256": webhook.SignLegacy(secret, payload),
	}
	for name, v := range want {
		if got := r.Header.Values(name); len(got) != 1 || got[0] != v {
			t.Errorf("header %s = %q, want [%q]", name, got, v)
		}
	}
	for name := range r.Header {
		if strings.HasPrefix(name, "Ce-") {
			if _, ok := want[name]; !ok {
				t.Errorf("unexpected header %s: %q", name, r.Header.Values(name))
			}
		}
	}
	if !webhook.VerifyLegacy(secret, r.Body, r.Header.Get("X-Outbox-Signature-256")) {
		t.Errorf("VerifyLegacy rejected the signature the publisher sent")
	}
	if err := webhook.Verify([]string{secret}, r.Header, r.Body, 0); err != nil {
		t.Errorf("Verify rejected the request the publisher sent: %v", err)
	}
	if id := r.Header.Get("Webhook-Id"); id != "order-42:OrderPaid" {
		t.Errorf("webhook-id = %q, want the msg_id", id)
	}
	if tenant, err := url.PathUnescape(r.Header.Get("Ce-Tenant")); err != nil || tenant != "Zürich office" {
		t.Errorf("decoded ce-tenant = %q, %v; want %q", tenant, err, "Zürich office")
	}
}

func TestPublishOmitsOptionalAttributes(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{}, nil)
	if errs := b.pub.Publish(t.Context(), []outbox.Message{msg("m1")}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	h := b.requests()[0].Header
	if got := h.Get("Ce-Source"); got != "/outbox" {
		t.Errorf("ce-source = %q, want the default /outbox", got)
	}
	for _, name := range []string{"Ce-Time", "Ce-Partitionkey", "X-Outbox-Signature-256", "Webhook-Id", "Webhook-Timestamp", "Webhook-Signature"} {
		if v, ok := h[name]; ok {
			t.Errorf("header %s = %q, want it absent", name, v)
		}
	}
}

func TestPublishCustomSignatureHeader(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{Secret: "k", SignatureHeader: "X-Hub-Signature-256", LegacySignature: true}, nil)
	m := msg("m1")
	if errs := b.pub.Publish(t.Context(), []outbox.Message{m}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	r := b.requests()[0]
	if !webhook.VerifyLegacy("k", r.Body, r.Header.Get("X-Hub-Signature-256")) {
		t.Errorf("X-Hub-Signature-256 = %q does not verify", r.Header.Get("X-Hub-Signature-256"))
	}
}

func TestPublishPercentEncodesAttributes(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{}, nil)
	m := outbox.Message{MsgID: `id "1" 100% é`, Topic: "tópic\tx", Key: "k\x7f", Payload: json.RawMessage(`1`)}
	if errs := b.pub.Publish(t.Context(), []outbox.Message{m}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	h := b.requests()[0].Header
	for name, want := range map[string]string{
		"Ce-Id":           "id%20%221%22%20100%25%20%C3%A9",
		"Ce-Type":         "t%C3%B3pic%09x",
		"Ce-Partitionkey": "k%7F",
		"Idempotency-Key": "id%20%221%22%20100%25%20%C3%A9",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if id, _ := url.PathUnescape(h.Get("Ce-Id")); id != m.MsgID {
		t.Errorf("decoded ce-id = %q, want %q", id, m.MsgID)
	}
}

// TestPublishControlCharacters: a row inserted by SQL with CR, LF, tab or
// NUL in its msg_id, key or a header value cannot inject a header or break
// the request: every value travels percent-encoded, the messages around it
// are delivered, and the next Publish goes through.
func TestPublishControlCharacters(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{}, nil)
	poison := outbox.Message{MsgID: "p\r\nX-Evil: 1", Topic: "order.paid", Key: "k\t\x00", Payload: json.RawMessage(`1`),
		Headers: map[string]string{"tenant": "eu1\r\n\r\nGET / HTTP/1.1"}}
	if errs := b.pub.Publish(t.Context(), []outbox.Message{msg("a"), poison, msg("b")}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	if errs := b.pub.Publish(t.Context(), []outbox.Message{msg("c")}); errs != nil {
		t.Fatalf("the next Publish: %v", errs)
	}
	reqs := b.requests()
	if len(reqs) != 4 {
		t.Fatalf("the server saw %d requests, want 4", len(reqs))
	}
	for _, r := range reqs {
		if r.Header.Get("X-Evil") != "" {
			t.Fatalf("a header was injected: %v", r.Header)
		}
		if id, _ := url.PathUnescape(r.Header.Get("Ce-Id")); id != poison.MsgID {
			continue
		}
		for name, want := range map[string]string{
			"Ce-Id":           "p%0D%0AX-Evil:%201",
			"Ce-Partitionkey": "k%09%00",
			"Ce-Tenant":       "eu1%0D%0A%0D%0AGET%20/%20HTTP/1.1",
		} {
			if got := r.Header.Get(name); got != want {
				t.Errorf("%s = %q, want %q", name, got, want)
			}
		}
		return
	}
	t.Fatal("the server did not see the message with control characters")
}

func TestPublishAcksAny2xx(t *testing.T) {
	t.Parallel()
	for _, code := range []int{200, 201, 202, 204, 299} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			b := setup(t, webhook.Config{}, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(code)
			})
			if errs := b.pub.Publish(t.Context(), []outbox.Message{msg("a"), msg("b")}); errs != nil {
				t.Errorf("Publish with status %d = %v, want nil (acked)", code, errs)
			}
		})
	}
}

// TestPublishClassifiesStatus checks that a status every message would get
// alike (the URL, the credentials, the server or what is behind it) pauses
// the relay, and that one that concerns the message spends its retries.
func TestPublishClassifiesStatus(t *testing.T) {
	t.Parallel()
	unavailable := []int{
		300, 301, 302, 303, 304, 307, 308, // redirects are not followed
		401, 403, 407, // credentials
		404, 405, 410, 414, // the URL or the method
		406, 408, 411, 421, 425, 426, 428, 429,
		501, 502, 503, 504, 505, 506, 507, 508, 510, 511, 520, 521, 522, 523, 524, 599,
	}
	refusals := []int{400, 402, 409, 412, 413, 415, 416, 417, 418, 422, 423, 424, 431, 451, 499, 500}
	type tc struct {
		code        int
		unavailable bool
	}
	var cases []tc
	for _, code := range unavailable {
		cases = append(cases, tc{code, true})
	}
	for _, code := range refusals {
		cases = append(cases, tc{code, false})
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			t.Parallel()
			b := setup(t, webhook.Config{}, func(w http.ResponseWriter, r *http.Request) {
				if tc.code == 429 || tc.code == 503 {
					w.Header().Set("Retry-After", "7")
				}
				w.WriteHeader(tc.code)
				io.WriteString(w, "nope\n")
			})
			errs := b.pub.Publish(t.Context(), []outbox.Message{msg("m1")})
			if len(errs) != 1 || errs[0] == nil {
				t.Fatalf("Publish = %v, want one error", errs)
			}
			err := errs[0]
			if got := outbox.IsUnavailable(err); got != tc.unavailable {
				t.Errorf("IsUnavailable(%v) = %v, want %v", err, got, tc.unavailable)
			}
			wantBody := "nope"
			if tc.code == http.StatusNotModified {
				wantBody = "" // a 304 has no body
			}
			var serr *webhook.StatusError
			if !errors.As(err, &serr) || serr.StatusCode != tc.code || serr.Body != wantBody {
				t.Errorf("error %v: want a *StatusError with code %d and body %q, got %+v", err, tc.code, wantBody, serr)
			}
			if tc.code == 429 || tc.code == 503 {
				if !strings.Contains(err.Error(), "Retry-After 7") {
					t.Errorf("error %q does not mention Retry-After", err)
				}
				if serr != nil && serr.RetryDelay != 7*time.Second {
					t.Errorf("RetryDelay = %s, want 7s", serr.RetryDelay)
				}
				if d := outbox.RetryAfter(err); d != 7*time.Second {
					t.Errorf("outbox.RetryAfter(%v) = %s, want 7s", err, d)
				}
			}
		})
	}
}

func TestPublishStatusErrorMessage(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 1000)
	b := setup(t, webhook.Config{}, func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Ce-Id") {
		case "short":
			http.Error(w, "database is down", http.StatusInternalServerError)
		case "long":
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, long)
		}
	})
	errs := b.pub.Publish(t.Context(), []outbox.Message{msg("short"), msg("long")})
	if len(errs) != 2 {
		t.Fatalf("Publish = %v, want 2 errors", errs)
	}
	want := "webhook: POST " + b.srv.URL + "/hook: 500 Internal Server Error: database is down"
	if errs[0] == nil || errs[0].Error() != want {
		t.Errorf("error = %v\nwant    %s", errs[0], want)
	}
	var serr *webhook.StatusError
	if !errors.As(errs[1], &serr) || serr.Body != long[:256] {
		t.Errorf("long body: error %v, want the first 256 bytes of the body", errs[1])
	}
}

func TestPublishDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{}, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hook" {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}
	})
	errs := b.pub.Publish(t.Context(), []outbox.Message{msg("m1")})
	if len(errs) != 1 || !outbox.IsUnavailable(errs[0]) {
		t.Fatalf("Publish = %v, want one unavailable error: every message would be redirected alike", errs)
	}
	if !strings.Contains(errs[0].Error(), `redirect to "/elsewhere" not followed`) {
		t.Errorf("error %q does not explain the redirect", errs[0])
	}
	if n := len(b.requests()); n != 1 {
		t.Errorf("server saw %d requests, want 1 (no redirect followed)", n)
	}
}

func TestPublishRedirectToGetWithCallersClient(t *testing.T) {
	t.Parallel()
	// A caller's client follows redirects as it likes; a 302 turns the POST
	// into a GET whose 200 must not count as an ack.
	b := setup(t, webhook.Config{Client: &http.Client{}}, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hook" {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}
	})
	errs := b.pub.Publish(t.Context(), []outbox.Message{msg("m1")})
	if len(errs) != 1 || !outbox.IsUnavailable(errs[0]) {
		t.Fatalf("Publish = %v, want one unavailable error: every message would be redirected alike", errs)
	}
	if !strings.Contains(errs[0].Error(), "answered a GET") {
		t.Errorf("error %q does not explain the redirect", errs[0])
	}
}

func TestPublishConnectionRefusedIsUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := newPublisher(t, webhook.Config{URL: "http://" + addr + "/hook", Timeout: 5 * time.Second})
	errs := p.Publish(t.Context(), []outbox.Message{msg("m1"), msg("m2")})
	if len(errs) != 2 {
		t.Fatalf("Publish = %v, want 2 errors", errs)
	}
	for i, err := range errs {
		if !outbox.IsUnavailable(err) {
			t.Errorf("errs[%d] = %v, want unavailable", i, err)
		}
		if !strings.HasPrefix(err.Error(), "broker unavailable: webhook: POST http://"+addr+"/hook: ") {
			t.Errorf("errs[%d] = %q, want it to name the endpoint", i, err)
		}
	}
}

func TestPublishUnknownHostIsUnavailable(t *testing.T) {
	t.Parallel()
	// .invalid never resolves (RFC 2606), so this needs no network.
	p := newPublisher(t, webhook.Config{URL: "http://outbox-test.invalid/hook", Timeout: 5 * time.Second})
	errs := p.Publish(t.Context(), []outbox.Message{msg("m1")})
	if len(errs) != 1 || !outbox.IsUnavailable(errs[0]) {
		t.Errorf("Publish = %v, want unavailable", errs)
	}
}

func TestPublishTLSFailureIsUnavailable(t *testing.T) {
	t.Parallel()
	// The default client does not trust httptest's certificate.
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("handler called despite a failed TLS handshake")
	}))
	srv.Config.ErrorLog = discardLog()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	p := newPublisher(t, webhook.Config{URL: srv.URL})
	errs := p.Publish(t.Context(), []outbox.Message{msg("m1")})
	if len(errs) != 1 || !outbox.IsUnavailable(errs[0]) {
		t.Errorf("Publish = %v, want unavailable", errs)
	}
}

func TestPublishConnectTimeoutIsUnavailable(t *testing.T) {
	t.Parallel()
	// The kernel completes the TCP handshake for a listener that never
	// accepts, so the TLS handshake hangs: no connection within Timeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := newPublisher(t, webhook.Config{URL: "https://" + ln.Addr().String() + "/hook", Timeout: 100 * time.Millisecond})
	errs := p.Publish(t.Context(), []outbox.Message{msg("m1")})
	if len(errs) != 1 || !outbox.IsUnavailable(errs[0]) {
		t.Fatalf("Publish = %v, want unavailable", errs)
	}
	if !strings.Contains(errs[0].Error(), "no connection within 100ms") {
		t.Errorf("error %q does not say the connection timed out", errs[0])
	}
}

// hang answers nothing until the client gives up.
func hang(w http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(5 * time.Second):
	}
}

// A request that timed out while the endpoint answered others of the same
// call spends a retry: the endpoint is at work, and may have acted on it.
func TestPublishResponseTimeoutBesideAnswersIsRefusal(t *testing.T) {
	t.Parallel()
	for _, other := range []int{http.StatusOK, http.StatusUnprocessableEntity} {
		t.Run(fmt.Sprint(other), func(t *testing.T) {
			t.Parallel()
			b := setup(t, webhook.Config{Timeout: 100 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Ce-Id") == "slow" {
					hang(w, r)
					return
				}
				w.WriteHeader(other)
			})
			start := time.Now()
			errs := b.pub.Publish(t.Context(), []outbox.Message{msg("slow"), msg("quick")})
			if len(errs) != 2 || errs[0] == nil {
				t.Fatalf("Publish = %v, want an error for the slow message", errs)
			}
			if outbox.IsUnavailable(errs[0]) {
				t.Errorf("error %v is unavailable; a timeout while the endpoint answers other requests must spend a retry", errs[0])
			}
			if !errors.Is(errs[0], context.DeadlineExceeded) || !strings.Contains(errs[0].Error(), "no response within 100ms") {
				t.Errorf("error %q: want a deadline error that names the timeout", errs[0])
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("Publish took %s with a 100ms Timeout", d)
			}
		})
	}
}

// An endpoint that answers no request of a call in time, or answers only
// with statuses that pause, hangs: the timeouts pause the relay instead of
// spending a retry of every message in flight, and a message held back
// behind one of them is unavailable too.
func TestPublishResponseTimeoutOfWholeBatchIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		other http.HandlerFunc // how the endpoint answers "other"
	}{
		{"all hang", hang},
		{"others 503", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, webhook.Config{Timeout: 100 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Ce-Id") == "other" {
					tc.other(w, r)
					return
				}
				hang(w, r)
			})
			msgs := []outbox.Message{msg("k-1"), msg("hung"), msg("other"), msg("k-2")}
			msgs[0].Key, msgs[3].Key = "k", "k"
			errs := b.pub.Publish(t.Context(), msgs)
			if len(errs) != len(msgs) {
				t.Fatalf("Publish = %v, want %d errors", errs, len(msgs))
			}
			for i, err := range errs {
				if !outbox.IsUnavailable(err) {
					t.Errorf("errs[%d] = %v, want unavailable", i, err)
				}
			}
			for _, i := range []int{0, 1} {
				if !errors.Is(errs[i], context.DeadlineExceeded) || !strings.Contains(errs[i].Error(), "answered no request of the batch") {
					t.Errorf("errs[%d] = %q: want a deadline error that says the endpoint answered nothing", i, errs[i])
				}
			}
			if !errors.Is(errs[3], outbox.ErrHeldBack) {
				t.Errorf("errs[3] = %v, want ErrHeldBack behind k-1", errs[3])
			}
		})
	}
}

// A message that hangs the endpoint, with only messages of its own key
// behind it: one request sent, one timeout, and nothing answered. The
// publisher cannot tell a hung endpoint from a message that hangs it, so
// the timeout is unavailable and the later messages of the key are held
// back; the relay tells the two apart (TestRelayChargesMessageThatHangs).
func TestPublishLoneTimeoutIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{Timeout: 100 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Ce-Id") == "poison" {
			hang(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	msgs := []outbox.Message{msg("poison"), msg("m2"), msg("m3")}
	for i := range msgs {
		msgs[i].Key = "all"
	}
	errs := b.pub.Publish(t.Context(), msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish = %v, want %d errors", errs, len(msgs))
	}
	if !outbox.IsUnavailable(errs[0]) || !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Fatalf("poison: %v, want unavailable (a timeout with nothing answered)", errs[0])
	}
	for _, i := range []int{1, 2} {
		if !errors.Is(errs[i], outbox.ErrHeldBack) {
			t.Fatalf("errs[%d] = %v, want held back", i, errs[i])
		}
	}
}

func TestPublishContextDoneBeforeSend(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	msgs := []outbox.Message{msg("a"), msg("b"), msg("c")}
	msgs[1].Key, msgs[2].Key = "k", "k"
	errs := b.pub.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish = %v, want %d errors", errs, len(msgs))
	}
	for i, err := range errs {
		if !outbox.IsUnavailable(err) || !errors.Is(err, context.Canceled) {
			t.Errorf("errs[%d] = %v, want unavailable wrapping context.Canceled", i, err)
		}
	}
	if n := len(b.requests()); n != 0 {
		t.Errorf("server saw %d requests after ctx was cancelled", n)
	}
}

func TestPublishContextCancelledInFlight(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	b := setup(t, webhook.Config{}, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-arrived
		cancel()
	}()
	errs := b.pub.Publish(ctx, []outbox.Message{msg("m1")})
	if len(errs) != 1 || !outbox.IsUnavailable(errs[0]) || !errors.Is(errs[0], context.Canceled) {
		t.Errorf("Publish = %v, want unavailable wrapping context.Canceled", errs)
	}
}

func TestPublishResultsInInputOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{Concurrency: 4}, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
		if strings.HasPrefix(r.Header.Get("Ce-Id"), "bad") {
			w.WriteHeader(http.StatusUnprocessableEntity)
		}
	})
	var msgs []outbox.Message
	for i := range 30 {
		id := fmt.Sprintf("ok-%d", i)
		if i%3 == 0 {
			id = fmt.Sprintf("bad-%d", i)
		}
		msgs = append(msgs, msg(id))
	}
	errs := b.pub.Publish(t.Context(), msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish returned %d results for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		if bad := i%3 == 0; bad != (err != nil) {
			t.Errorf("errs[%d] (msg_id %s) = %v", i, msgs[i].MsgID, err)
		}
	}
}

func TestPublishSameKeyInOrder(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		order    = map[string][]string{} // key -> msg_ids in arrival order
		inFlight = map[string]int{}
	)
	b := setup(t, webhook.Config{Concurrency: 4}, func(w http.ResponseWriter, r *http.Request) {
		key, id := r.Header.Get("Ce-Partitionkey"), r.Header.Get("Ce-Id")
		mu.Lock()
		inFlight[key]++
		if key != "" && inFlight[key] > 1 {
			t.Errorf("two messages of key %q in flight at once", key)
		}
		order[key] = append(order[key], id)
		mu.Unlock()
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
		mu.Lock()
		inFlight[key]--
		mu.Unlock()
	})
	var msgs []outbox.Message
	want := map[string][]string{}
	for i := range 60 {
		m := msg(fmt.Sprintf("m%02d", i))
		if i%5 != 0 { // every fifth message has no key
			m.Key = fmt.Sprintf("k%d", i%3)
			want[m.Key] = append(want[m.Key], m.MsgID)
		}
		msgs = append(msgs, m)
	}
	if errs := b.pub.Publish(t.Context(), msgs); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	mu.Lock()
	defer mu.Unlock()
	for key, ids := range want {
		if got := strings.Join(order[key], ","); got != strings.Join(ids, ",") {
			t.Errorf("key %s arrived as %s, want %s", key, got, strings.Join(ids, ","))
		}
	}
	if n := len(order[""]); n != 12 {
		t.Errorf("server saw %d key-less messages, want 12", n)
	}
}

func TestPublishHoldsBackSameKeyAfterFailure(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{}, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Ce-Id") == "k-1" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	msgs := []outbox.Message{msg("k-1"), msg("other"), msg("k-2"), msg("k-3")}
	msgs[0].Key, msgs[2].Key, msgs[3].Key = "k", "k", "k"
	errs := b.pub.Publish(t.Context(), msgs)
	if len(errs) != 4 {
		t.Fatalf("Publish = %v, want 4 results", errs)
	}
	if errs[0] == nil || outbox.IsUnavailable(errs[0]) {
		t.Errorf("errs[0] = %v, want a refusal", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("errs[1] = %v, want nil: another key is not held back", errs[1])
	}
	for _, i := range []int{2, 3} {
		if outbox.IsUnavailable(errs[i]) || !errors.Is(errs[i], outbox.ErrHeldBack) {
			t.Errorf("errs[%d] = %v, want ErrHeldBack (and not unavailable)", i, errs[i])
		}
	}
	var ids []string
	for _, r := range b.requests() {
		ids = append(ids, r.Header.Get("Ce-Id"))
	}
	if len(ids) != 2 {
		t.Errorf("server saw %v, want only k-1 and other", ids)
	}
}

func TestPublishConcurrencyLimit(t *testing.T) {
	t.Parallel()
	var cur, peak atomic.Int32
	b := setup(t, webhook.Config{Concurrency: 3}, func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
		cur.Add(-1)
	})
	var msgs []outbox.Message
	for i := range 24 {
		m := msg(fmt.Sprintf("m%d", i))
		if i%4 == 0 {
			m.Key = fmt.Sprintf("k%d", i%8)
		}
		msgs = append(msgs, m)
	}
	if errs := b.pub.Publish(t.Context(), msgs); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	if p := peak.Load(); p > 3 {
		t.Errorf("%d requests in flight at once, Concurrency is 3", p)
	} else if p < 2 {
		t.Errorf("at most %d request in flight; want messages sent in parallel", p)
	}
}

func TestPublishReusesConnections(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("Ce-Id") == "m3" {
			w.WriteHeader(http.StatusBadRequest)
		}
		// A body the publisher must drain for the connection to be reused.
		w.Write(make([]byte, 10<<10))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	p := newPublisher(t, webhook.Config{URL: srv.URL})
	for i := range 6 {
		p.Publish(t.Context(), []outbox.Message{msg(fmt.Sprintf("m%d", i))})
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("six sequential requests used %d connections, want 1", n)
	}
}

func TestCloseClosesIdleConnections(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	p, err := webhook.New(webhook.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if errs := p.Publish(t.Context(), []outbox.Message{msg("m1")}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the idle connection was not closed by Close")
	}
}

func TestPublishEmptyBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{}, nil)
	if errs := b.pub.Publish(t.Context(), nil); errs != nil {
		t.Errorf("Publish(nil) = %v, want nil", errs)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  webhook.Config
		want string // in the error
	}{
		{"empty URL", webhook.Config{}, "Config.URL is empty"},
		{"ftp URL", webhook.Config{URL: "ftp://example.com/in"}, `scheme "ftp"`},
		{"relative URL", webhook.Config{URL: "/events"}, `scheme ""`},
		{"no host", webhook.Config{URL: "https:///events"}, "has no host"},
		{"unparsable URL", webhook.Config{URL: "http://exa mple.com/"}, "not a valid URL"},
		{"negative timeout", webhook.Config{URL: "https://example.com", Timeout: -time.Second}, "Config.Timeout is -1s"},
		{"negative concurrency", webhook.Config{URL: "https://example.com", Concurrency: -1}, "Config.Concurrency is -1"},
		{"bad signature header", webhook.Config{URL: "https://example.com", Secret: "k", SignatureHeader: "X Sig"}, "Config.SignatureHeader"},
		{"whsec secret not base64", webhook.Config{URL: "https://example.com", Secret: "whsec_!!"}, "Config.Secret: webhook: invalid secret"},
		{"empty rotation secret", webhook.Config{URL: "https://example.com", Secret: "k", Secrets: []string{""}}, "Config.Secrets[0]"},
		{"legacy without secret", webhook.Config{URL: "https://example.com", LegacySignature: true}, "Config.LegacySignature needs Config.Secret"},
		{"static webhook-signature", webhook.Config{URL: "https://example.com", Header: http.Header{"Webhook-Signature": {"v1,x"}}}, "Standard Webhooks"},
		{"bad source", webhook.Config{URL: "https://example.com", Source: "%zz"}, "Config.Source"},
		{"ce header", webhook.Config{URL: "https://example.com", Header: http.Header{"ce-id": {"x"}}}, "CloudEvents attribute"},
		{"idempotency header", webhook.Config{URL: "https://example.com", Header: http.Header{"Idempotency-Key": {"x"}}}, "Idempotency-Key"},
		{"content type header", webhook.Config{URL: "https://example.com", Header: http.Header{"Content-Type": {"text/plain"}}}, "Content-Type"},
		{"signature header", webhook.Config{URL: "https://example.com", Header: http.Header{"X-Outbox-Signature-256": {"x"}}}, "signature header"},
		{"header name", webhook.Config{URL: "https://example.com", Header: http.Header{"Bad Name": {"x"}}}, "invalid name"},
		{"header value", webhook.Config{URL: "https://example.com", Header: http.Header{"Authorization": {"a\r\nInjected: 1"}}}, "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := webhook.New(tc.cfg)
			if err == nil {
				p.Close()
				t.Fatalf("New(%+v) succeeded, want an error containing %q", tc.cfg, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "webhook: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %q, want it to start with \"webhook: \" and contain %q", err, tc.want)
			}
		})
	}
}

func TestNewRedactsPassword(t *testing.T) {
	t.Parallel()
	_, err := webhook.New(webhook.Config{URL: "ftp://user:hunter2@example.com/"})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("New: %v, want an error without the password", err)
	}
}

func TestNewCopiesHeader(t *testing.T) {
	t.Parallel()
	h := http.Header{"Authorization": {"Bearer one"}}
	b := setup(t, webhook.Config{Header: h}, nil)
	h.Set("Authorization", "Bearer two")
	if errs := b.pub.Publish(t.Context(), []outbox.Message{msg("m1")}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	if got := b.requests()[0].Header.Get("Authorization"); got != "Bearer one" {
		t.Errorf("Authorization = %q, want the value at New", got)
	}
}

// discardLog silences a test server's log of the handshake errors a test
// provokes on purpose.
func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }

// TestPublishSignsWithEverySecret: with several secrets each request carries
// a signature per secret, and no legacy header unless asked for.
func TestPublishSignsWithEverySecret(t *testing.T) {
	t.Parallel()
	b := setup(t, webhook.Config{Secret: "whsec_b2xkLXNlY3JldA==", Secrets: []string{"new-secret"}}, nil)
	if errs := b.pub.Publish(t.Context(), []outbox.Message{msg(`id "1" 100% é`)}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	r := b.requests()[0]
	if n := len(strings.Fields(r.Header.Get("Webhook-Signature"))); n != 2 {
		t.Errorf("webhook-signature %q: %d signatures, want 2", r.Header.Get("Webhook-Signature"), n)
	}
	for _, secret := range []string{"old-secret", "whsec_b2xkLXNlY3JldA==", "new-secret"} {
		if err := webhook.Verify([]string{secret}, r.Header, r.Body, 0); err != nil {
			t.Errorf("Verify with %q: %v", secret, err)
		}
	}
	if v, ok := r.Header["X-Outbox-Signature-256"]; ok {
		t.Errorf("X-Outbox-Signature-256 = %q without LegacySignature", v)
	}
}

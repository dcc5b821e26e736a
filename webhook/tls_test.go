package webhook_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testbroker"
	"github.com/outbox-go/outbox/webhook"
)

// TestTLSParameters: an endpoint whose certificate a private CA signed and
// that requires a client certificate (mTLS) is reached with the URL's TLS
// parameters, which the endpoint never sees; every mistake is an error
// that names it, and plain HTTP to it is no success.
func TestTLSParameters(t *testing.T) {
	t.Parallel()
	p := testbroker.NewPKI(t)
	var seen atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "no client certificate", http.StatusForbidden)
			return
		}
		seen.Store(r.URL.RawQuery)
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.TLS = p.ServerTLS(t, true)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	msg := []outbox.Message{{MsgID: "tls-1", Topic: "t", Payload: []byte(`{"n":1}`), CreatedAt: time.Now()}}
	files := "tls_ca=" + p.CA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey

	pub, err := webhook.New(webhook.Config{URL: srv.URL + "/events?tenant=a&" + files})
	if err != nil {
		t.Fatal(err)
	}
	if errs := pub.Publish(t.Context(), msg); errs != nil {
		t.Fatalf("Publish with the CA and a client certificate: %v", errs)
	}
	if q, _ := seen.Load().(string); q != "tenant=a" {
		t.Fatalf("the endpoint saw the query %q, want only tenant=a", q)
	}

	for _, tc := range []struct{ name, url, want string }{
		{"wrong CA", srv.URL + "/?tls_ca=" + p.OtherCA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey, "certificate signed by unknown authority"},
		{"no client certificate", srv.URL + "/?tls_ca=" + p.CA, ""},
		{"plain http to the TLS endpoint", strings.Replace(srv.URL, "https://", "http://", 1) + "/", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub, err := webhook.New(webhook.Config{URL: tc.url, Timeout: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			errs := pub.Publish(t.Context(), msg)
			if errs == nil || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("Publish = %v, want a failure containing %q", errs, tc.want)
			}
		})
	}
	for _, tc := range []struct{ name, url, want string }{
		{"expired client certificate", srv.URL + "/?tls_ca=" + p.CA + "&tls_cert=" + p.ExpiredClientCert + "&tls_key=" + p.ExpiredClientKey, "expired"},
		{"TLS parameters on http://", strings.Replace(srv.URL, "https://", "http://", 1) + "/?" + files, "need an https:// URL"},
		{"with a client of the caller's", srv.URL + "/?" + files, "set them on its Transport"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := webhook.Config{URL: tc.url}
			if strings.Contains(tc.name, "caller") {
				cfg.Client = http.DefaultClient
			}
			if _, err := webhook.New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestTLSExpiredServer: an endpoint whose certificate expired is refused,
// and the error says so.
func TestTLSExpiredServer(t *testing.T) {
	t.Parallel()
	p := testbroker.NewPKI(t)
	p.ServerCert, p.ServerKey = p.ExpiredServerCert, p.ExpiredServerKey
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	srv.TLS = p.ServerTLS(t, false)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pub, err := webhook.New(webhook.Config{URL: srv.URL + "/?tls_ca=" + p.CA})
	if err != nil {
		t.Fatal(err)
	}
	errs := pub.Publish(t.Context(), []outbox.Message{{MsgID: "x", Topic: "t", Payload: []byte(`{}`), CreatedAt: time.Now()}})
	if errs == nil || !strings.Contains(errs[0].Error(), "expired") {
		t.Fatalf("Publish to an endpoint with an expired certificate = %v, want an error about the expiry", errs)
	}
}

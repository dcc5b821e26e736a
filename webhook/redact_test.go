package webhook_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/webhook"
)

// The errors of a publisher, which the relay stores as last_error and logs,
// never hold the endpoint's credentials: a password, a token as user name,
// or a secret query value.
func TestErrorsMaskTheURLsCredentials(t *testing.T) {
	t.Parallel()
	const secrets = "pw-0f-hook tok-0f-hook sig-0f-hook key-0f-hook loc-0f-hook"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/refuse":
			http.Error(w, "bad payload", http.StatusUnprocessableEntity)
		case "/move":
			w.Header().Set("Location", "/final?token=loc-0f-hook")
			w.WriteHeader(http.StatusMovedPermanently)
		}
	}))
	defer srv.Close()
	// A port that refuses connections.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()

	host := strings.TrimPrefix(srv.URL, "http://")
	for _, raw := range []string{
		"http://user:pw-0f-hook@" + host + "/refuse?token=tok-0f-hook",
		"http://tok-0f-hook@" + host + "/refuse?X-Amz-Signature=sig-0f-hook&api_key=key-0f-hook",
		"http://" + host + "/move?access_token=tok-0f-hook",
		"http://user:pw-0f-hook@" + down + "/in?token=tok-0f-hook&sig=sig-0f-hook",
	} {
		p, err := webhook.New(webhook.Config{URL: raw})
		if err != nil {
			t.Fatalf("New(%s): %v", raw, err)
		}
		errs := p.Publish(t.Context(), []outbox.Message{{MsgID: "m1", Topic: "t", Payload: []byte(`{}`)}})
		p.Close()
		if errs == nil || errs[0] == nil {
			t.Fatalf("%s: Publish succeeded, want an error", raw)
		}
		msg := errs[0].Error()
		for _, s := range strings.Fields(secrets) {
			if strings.Contains(msg, s) {
				t.Errorf("%s: the error holds %q: %s", raw, s, msg)
			}
		}
		if !strings.Contains(msg, "xxxxx") {
			t.Errorf("%s: the error shows no masked URL: %s", raw, msg)
		}
	}
}

// A URL that does not parse is not quoted in the error: Go's parser
// quotes the part of a password before a '/' as the port.
func TestNewDoesNotQuoteAnUnparsableURL(t *testing.T) {
	t.Parallel()
	_, err := webhook.New(webhook.Config{URL: "https://user:p4ss/w0rd?x#y@example.com/events?token=t0k"})
	if err == nil {
		t.Fatal("New accepted the URL")
	}
	for _, s := range []string{"p4ss", "w0rd", "t0k"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("the error holds %q: %v", s, err)
		}
	}
}

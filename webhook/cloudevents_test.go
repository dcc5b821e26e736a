package webhook

import (
	"net/http"
	"net/url"
	"testing"
	"time"
)

func TestEncodeValue(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                 "",
		"order-42:Paid":    "order-42:Paid",
		"a b":              "a%20b",
		`"q"`:              "%22q%22",
		"100%":             "100%25",
		"é":                "%C3%A9",
		"tab\there":        "tab%09here",
		"del\x7f":          "del%7F",
		"~!#$&'()*+,/:;=?": "~!#$&'()*+,/:;=?",
	} {
		if got := encodeValue(in); got != want {
			t.Errorf("encodeValue(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzEncodeValue checks that any string becomes a legal header value made of
// printable ASCII, and that url.PathUnescape gives the string back.
func FuzzEncodeValue(f *testing.F) {
	for _, s := range []string{"", "plain", "a b\"%", "Zürich", "\x00\r\n", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := encodeValue(s)
		for i := 0; i < len(enc); i++ {
			if c := enc[i]; c < 0x21 || c > 0x7e || c == '"' {
				t.Fatalf("encodeValue(%q) = %q has byte %#x", s, enc, c)
			}
		}
		dec, err := url.PathUnescape(enc)
		if err != nil || dec != s {
			t.Fatalf("PathUnescape(encodeValue(%q)) = %q, %v", s, dec, err)
		}
	})
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	p, err := New(Config{URL: "https://user:pw@example.com/events"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.source != "/outbox" || p.sigHeader != "X-Outbox-Signature-256" || p.timeout != 10*time.Second || p.concurrency != 16 {
		t.Errorf("defaults: source %q, signature header %q, timeout %s, concurrency %d",
			p.source, p.sigHeader, p.timeout, p.concurrency)
	}
	if p.redacted != "https://user:xxxxx@example.com/events" {
		t.Errorf("redacted URL = %q", p.redacted)
	}
	tr, ok := p.client.Transport.(*http.Transport)
	if !ok || tr.MaxIdleConnsPerHost != 16 {
		t.Errorf("default transport %T: want *http.Transport with MaxIdleConnsPerHost 16", p.client.Transport)
	}
	if p.client.CheckRedirect == nil {
		t.Error("default client follows redirects")
	}

	p2, err := New(Config{URL: "http://example.com", Concurrency: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if tr := p2.client.Transport.(*http.Transport); tr.MaxIdleConnsPerHost != 200 || tr.MaxIdleConns < 200 {
		t.Errorf("Concurrency 200: MaxIdleConnsPerHost %d, MaxIdleConns %d", tr.MaxIdleConnsPerHost, tr.MaxIdleConns)
	}
}

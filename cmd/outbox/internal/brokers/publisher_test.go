package brokers

import (
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"strings"
	"testing"

	"github.com/outbox-go/outbox"
)

func TestOpenPublisher(t *testing.T) {
	t.Parallel()
	pub, closeFn, err := Open(t.Context(), "discard:", PublisherOptions{})
	if err != nil || pub != outbox.Discard {
		t.Fatalf("discard: %v, %v", pub, err)
	}
	closeFn()
	pub, closeFn, err = Open(t.Context(), "https://user:pw-in-url@example.com/hook", PublisherOptions{Source: "/x", WebhookSecrets: []string{"s3cret"}})
	if err != nil || pub == nil {
		t.Fatalf("https: %v", err)
	}
	closeFn()
	if got := cli.Scrub("sent to https://user:pw-in-url@example.com signed with s3cret"); strings.Contains(got, "pw-in-url") || strings.Contains(got, "s3cret") {
		t.Errorf("redact left a secret: %s", got)
	}
	for url, want := range map[string]string{
		"kafka://127.0.0.1:1":                    "broker unavailable",
		"amqp://guest:pw-in-url@127.0.0.1:1/":    "broker unavailable",
		"redis://127.0.0.1:1/0":                  "broker unavailable",
		"nats://127.0.0.1:1":                     "broker unavailable",
		"nats://127.0.0.1:4222?bogus=1":          `unknown URL parameter "bogus"`,
		"amqp://guest:guest@127.0.0.1:5672/?x=1": `unknown URL parameter "x"`,
		"mqtt://127.0.0.1:1883?qos=0":            "QoS 0 is not supported",
		"ftp://h":                                `unknown broker scheme "ftp"`,
		"nothing":                                "not a broker URL",
		"http://":                                "no host",
	} {
		_, closeFn, err := Open(t.Context(), url, PublisherOptions{})
		if err == nil {
			closeFn()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q): %v, want %q", url, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "pw-in-url") || !strings.Contains(err.Error(), "check --broker") && strings.Contains(url, "127.0.0.1")) {
			t.Errorf("Open(%q): %v shows the password or does not say what to check", url, err)
		}
	}
}

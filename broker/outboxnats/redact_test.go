package outboxnats

import (
	"strings"
	"testing"
)

// The servers' redacted form, which every error and log line names, holds
// no token or password, whatever characters they hold.
func TestRedactedServers(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"nats://s3cr3t-t0ken@127.0.0.1:4222":                    "nats://xxxxx@127.0.0.1:4222",
		"nats://u:p%2Fw%40d@h1:4222,nats://t0k3n@h2:4222":       "nats://u:xxxxx@h1:4222,nats://xxxxx@h2:4222",
		"nats://u:pa:ss@h:4222?stream=S":                        "nats://u:xxxxx@h:4222?stream=S",
		"tls://u:s3cret@h:4222,tls://h2:4222?subject=a.{topic}": "tls://u:xxxxx@h:4222,tls://h2:4222?subject=a.{topic}",
	} {
		u, err := parseURL(raw)
		if err != nil {
			t.Fatalf("parseURL(%q): %v", raw, err)
		}
		if want, _, _ = strings.Cut(want, "?"); u.redacted != want { // the query is kept apart
			t.Errorf("parseURL(%q).redacted = %q, want %q", raw, u.redacted, want)
		}
		for _, s := range []string{"s3cr3t-t0ken", "t0k3n", "p%2Fw", "pa:ss", "s3cret"} {
			if strings.Contains(u.redacted, s) {
				t.Errorf("parseURL(%q).redacted = %q holds %q", raw, u.redacted, s)
			}
		}
	}
	// A password with an unencoded '/' or '#' fails to parse; the error
	// does not quote it.
	for _, raw := range []string{"nats://u:pa/ss@h:4222", "nats://to#ken@h:4222", "nats://u:pw/x@h1:4222,nats://h2:4222"} {
		_, err := parseURL(raw)
		if err == nil {
			continue
		}
		for _, s := range []string{"pa/ss", "to#ken", "ken", "pw/x"} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("parseURL(%q): %v holds %q", raw, err, s)
			}
		}
	}
}

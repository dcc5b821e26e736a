package main

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// startKfakeSASL starts a kfake cluster that takes SASL PLAIN for one user
// and answers other credentials as Kafka does, with SASL_AUTHENTICATION_FAILED
// (kfake itself closes the connection). It returns the broker's address.
func startKfakeSASL(t *testing.T, user, pass string) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(),
		kfake.EnableSASL(), kfake.Superuser("PLAIN", user, pass))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.SASLAuthenticateRequest)
		// PLAIN: authzid NUL user NUL password.
		if parts := strings.Split(string(req.SASLAuthBytes), "\x00"); len(parts) == 3 && parts[1] == user && parts[2] == pass {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := "Authentication failed: Invalid username or password"
		resp.ErrorMessage = &msg
		return resp, nil, true
	})
	return c.ListenAddrs()[0]
}

// TestRelayKafkaRefusedLogin: a Kafka broker that refuses the URL's
// credentials ends the relay at once, non-zero, with one line that says to
// check them and masks the password; the right credentials keep it running.
func TestRelayKafkaRefusedLogin(t *testing.T) {
	t.Parallel()
	const pass, wrong = "g00d-pa55", "wr0ng-s3cret"
	addr := startKfakeSASL(t, "relay", pass)
	b := newSQLite(t)
	mustRun(t, "migrate", "--db", b.dsn)

	start := time.Now()
	r := runCLI(t, nil, "relay", "--db", b.dsn, "--broker", "kafka://relay:"+wrong+"@"+addr+"?topic=h-kcreds.{topic}")
	took := time.Since(start)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	last := lines[len(lines)-1]
	switch {
	case r.code == 0:
		t.Fatalf("relay with a wrong Kafka password exited 0: %s", r)
	case took > 20*time.Second || strings.Contains(r.stderr, "trying again"):
		t.Fatalf("relay waited for the broker (%s): %s", took, r)
	case strings.Contains(r.stderr, wrong) || strings.Contains(r.stdout, wrong):
		t.Fatalf("relay showed the password: %s", r)
	case len(lines) != 1:
		t.Fatalf("relay printed %d lines, want the one that says why: %s", len(lines), r)
	case !strings.Contains(last, "refused the login") || !strings.Contains(last, "relay:xxxxx@") ||
		!strings.Contains(last, "password") || !strings.Contains(last, "check --broker"):
		t.Fatalf("relay's last line %q: want the refusal, what to check and the URL with its password masked; all: %s", last, r)
	}
	t.Logf("exit %d after %s: %s", r.code, took.Round(time.Millisecond), last)

	var stderr func() string
	stop := startRelayLogged(t, &stderr, nil, "--db", b.dsn, "--broker", "kafka://relay:"+pass+"@"+addr+"?topic=h-kcreds.{topic}",
		"--interval", "50ms", "--metrics-addr", "127.0.0.1:0")
	waitProbe(t, urlInLog(t, stderr, healthURL)+"/readyz", 200, "ready\n", 30*time.Second)
	if r := stop(); r.code != 0 || strings.Contains(r.stderr, pass) {
		t.Fatalf("relay with the right Kafka password: %s", r)
	}
}

package outboxkafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
)

// saslCluster starts a kfake cluster that takes SASL PLAIN for one user,
// and refuses other credentials as Kafka does: a SASLAuthenticate answer
// with SASL_AUTHENTICATION_FAILED (kfake itself closes the connection), and
// UNSUPPORTED_SASL_MECHANISM for a mechanism other than PLAIN, as a broker
// with sasl.enabled.mechanisms=PLAIN does.
func saslCluster(t *testing.T, user, pass string) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("PLAIN", user, pass),
		kfake.SeedTopics(1, "h-kcreds"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.ControlKey(int16(kmsg.SASLHandshake), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.SASLHandshakeRequest)
		if req.Mechanism == "PLAIN" {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		resp.SupportedMechanisms = []string{"PLAIN"}
		return resp, nil, true
	})
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

// TestRefusedLogin: credentials the broker refuses fail NewPublisher and
// NewSubscriber at once with ErrRefusedLogin, not outbox.Unavailable, and
// with no password in the message; the right ones publish.
func TestRefusedLogin(t *testing.T) {
	t.Parallel()
	const pass, wrong = "g00d-pa55", "wr0ng-s3cret"
	addr := saslCluster(t, "relay", pass)

	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: "kafka://relay:" + pass + "@" + addr, Destination: "h-kcreds"})
	msg := outbox.Message{MsgID: "h-kcreds-1", Topic: "h-kcreds", Payload: []byte(`{"n":1}`), CreatedAt: time.Now()}
	if errs := pub.Publish(t.Context(), []outbox.Message{msg}); errs != nil {
		t.Fatalf("Publish with the right password: %v", errs)
	}

	for _, tc := range []struct {
		name, hint string
		code       *kerr.Error
		open       func(ctx context.Context) error
	}{
		{"wrong password", "the URL's user, password", kerr.SaslAuthenticationFailed, func(ctx context.Context) error {
			_, err := outboxkafka.NewPublisher(ctx, outboxkafka.PublisherConfig{URL: "kafka://relay:" + wrong + "@" + addr})
			return err
		}},
		{"unknown user", "the URL's user, password", kerr.SaslAuthenticationFailed, func(ctx context.Context) error {
			_, err := outboxkafka.NewPublisher(ctx, outboxkafka.PublisherConfig{URL: "kafka://mallory:" + wrong + "@" + addr})
			return err
		}},
		{"other mechanism", "sasl parameter", kerr.UnsupportedSaslMechanism, func(ctx context.Context) error {
			_, err := outboxkafka.NewPublisher(ctx, outboxkafka.PublisherConfig{URL: "kafka://relay:" + wrong + "@" + addr + "?sasl=scram-sha-256"})
			return err
		}},
		{"PublisherConfig.SASL", "PublisherConfig.SASL", kerr.SaslAuthenticationFailed, func(ctx context.Context) error {
			_, err := outboxkafka.NewPublisher(ctx, outboxkafka.PublisherConfig{URL: "kafka://" + addr,
				SASL: plain.Auth{User: "relay", Pass: wrong}.AsMechanism()})
			return err
		}},
		{"subscriber", "the URL's user, password", kerr.SaslAuthenticationFailed, func(ctx context.Context) error {
			_, err := outboxkafka.NewSubscriber(ctx, outboxkafka.SubscriberConfig{URL: "kafka://relay:" + wrong + "@" + addr,
				Group: "h-kcreds", Topics: []string{"h-kcreds"}})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			start := time.Now()
			err := tc.open(ctx)
			took := time.Since(start)
			switch {
			case err == nil:
				t.Fatal("opened with a wrong password")
			case !errors.Is(err, outboxkafka.ErrRefusedLogin) || !errors.Is(err, tc.code):
				t.Fatalf("error %q: want ErrRefusedLogin wrapping %s", err, tc.code.Message)
			case outbox.IsUnavailable(err):
				t.Fatalf("error %q is outbox.Unavailable: the relay would wait for ever", err)
			case strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), pass):
				t.Fatalf("error %q shows the password", err)
			case !strings.Contains(err.Error(), tc.hint):
				t.Fatalf("error %q does not say to check %s", err, tc.hint)
			case took > 5*time.Second:
				t.Fatalf("refused after %s; want it at once, not after the dial timeout", took)
			}
			t.Logf("refused in %s: %v", took.Round(time.Millisecond), err)
		})
	}
}

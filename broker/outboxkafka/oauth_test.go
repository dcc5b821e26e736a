package outboxkafka_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
)

// oauthCluster starts a kfake cluster that takes SASL OAUTHBEARER with the
// bearer token only (kfake knows PLAIN and SCRAM, so the test answers the
// handshake and the authentication itself). It counts the authentications
// it accepted.
func oauthCluster(t *testing.T, token string) (addr string, accepted *atomic.Int64) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "oauth"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	accepted = new(atomic.Int64)
	c.ControlKey(int16(kmsg.SASLHandshake), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.SASLHandshakeRequest)
		resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
		if req.Mechanism != "OAUTHBEARER" {
			resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		}
		resp.SupportedMechanisms = []string{"OAUTHBEARER"}
		return resp, nil, true
	})
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.SASLAuthenticateRequest)
		resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		// RFC 7628: "n,[a=authzid],\x01auth=Bearer TOKEN\x01[key=value\x01]*\x01".
		var got string
		for _, kv := range strings.Split(string(req.SASLAuthBytes), "\x01") {
			if v, ok := strings.CutPrefix(kv, "auth=Bearer "); ok {
				got = v
			}
		}
		if !strings.HasPrefix(string(req.SASLAuthBytes), "n,") || got != token {
			resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
			msg := "invalid bearer token"
			resp.ErrorMessage = &msg
			return resp, nil, true
		}
		accepted.Add(1)
		resp.SessionLifetimeMillis = time.Hour.Milliseconds()
		return resp, nil, true
	})
	return c.ListenAddrs()[0], accepted
}

// TestOAuthBearer: sasl=oauthbearer sends the URL's password as the bearer
// token; a cluster that takes it accepts the publish, and a wrong token is
// refused with an error that shows no token.
func TestOAuthBearer(t *testing.T) {
	t.Parallel()
	const token = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJyZWxheSJ9.good-t0ken"
	addr, accepted := oauthCluster(t, token)

	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: "kafka://:" + token + "@" + addr + "?sasl=oauthbearer", Destination: "oauth"})
	msg := outbox.Message{MsgID: "oauth-1", Topic: "oauth", Payload: []byte(`{"n":1}`), CreatedAt: time.Now()}
	if errs := pub.Publish(t.Context(), []outbox.Message{msg}); errs != nil {
		t.Fatalf("Publish with a good token: %v", errs)
	}
	if accepted.Load() == 0 {
		t.Fatal("published without authenticating")
	}

	const wrong = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJtYWxsb3J5In0.bad-t0ken"
	_, err := outboxkafka.NewPublisher(t.Context(), outboxkafka.PublisherConfig{
		URL: "kafka://:" + wrong + "@" + addr + "?sasl=oauthbearer&dial_timeout=3s", Destination: "oauth"})
	if err == nil {
		t.Fatal("NewPublisher with a wrong token succeeded")
	}
	if !errors.Is(err, outboxkafka.ErrRefusedLogin) || outbox.IsUnavailable(err) || !strings.Contains(err.Error(), "invalid bearer token") ||
		strings.Contains(err.Error(), "bad-t0ken") {
		t.Fatalf("error %q: want ErrRefusedLogin with the broker's reason, and no token", err)
	}
}

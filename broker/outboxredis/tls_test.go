package outboxredis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxredis"
	"github.com/outbox-go/outbox/internal/testbroker"
)

// roundTrip publishes one message through url and reads it with a
// subscriber of the same URL.
func roundTrip(t *testing.T, url, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sub, err := outboxredis.NewSubscriber(ctx, outboxredis.SubscriberConfig{URL: url, Group: "g", Topic: topic})
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	defer sub.Close()
	pub, err := outboxredis.NewPublisher(ctx, outboxredis.PublisherConfig{URL: url})
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	defer pub.Close()
	msg := outbox.Message{MsgID: topic + "-1", Topic: topic, Payload: []byte(`{"n":1}`), CreatedAt: time.Now()}
	if errs := pub.Publish(ctx, []outbox.Message{msg}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	got := make(chan string, 1)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(runCtx, func(_ context.Context, m outbox.Message) error {
			select {
			case got <- m.MsgID:
			default:
			}
			return nil
		})
	}()
	select {
	case id := <-got:
		if id != msg.MsgID {
			t.Fatalf("read %q, want %q", id, msg.MsgID)
		}
	case <-ctx.Done():
		t.Fatal("the subscriber got nothing")
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
}

// TestTLS: rediss:// with the TLS parameters and an ACL user reaches a
// server that listens with TLS only and requires a client certificate;
// every mistake is an error that names it.
func TestTLS(t *testing.T) {
	t.Parallel()
	p := testbroker.NewPKI(t)
	srv := testbroker.RedisTLS(t, p, true, "--user", "default", "off", "--user", "alice", "on", ">s3cret-pw", "~*", "&*", "+@all")
	base := "rediss://alice:s3cret-pw@" + srv.Addr() + "/0?dial_timeout=3s"
	files := "&tls_ca=" + p.CA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey
	roundTrip(t, base+files, "tls")

	for _, tc := range []struct {
		name, url, want string
		config          bool
	}{
		{"plain text to the TLS port", strings.Replace(base, "rediss://", "redis://", 1), "", false},
		{"TLS parameters on redis://", strings.Replace(base, "rediss://", "redis://", 1) + files, "use rediss://", true},
		{"wrong CA", base + "&tls_ca=" + p.OtherCA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey, "certificate signed by unknown authority", false},
		{"no client certificate", base + "&tls_ca=" + p.CA, "", false},
		{"expired client certificate", base + "&tls_ca=" + p.CA + "&tls_cert=" + p.ExpiredClientCert + "&tls_key=" + p.ExpiredClientKey, "expired", true},
		{"wrong password", strings.Replace(base, "s3cret-pw", "not-it-pw", 1) + files, "WRONGPASS", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := outboxredis.NewPublisher(t.Context(), outboxredis.PublisherConfig{URL: tc.url})
			if err == nil {
				t.Fatal("NewPublisher succeeded")
			}
			if got := errors.Is(err, outboxredis.ErrConfig); got != tc.config {
				t.Fatalf("errors.Is(ErrConfig) = %v, want %v: %v", got, tc.config, err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "s3cret-pw") || strings.Contains(msg, "not-it-pw") {
				t.Fatalf("error %q, want it to contain %q and no password", msg, tc.want)
			}
		})
	}
}

// TestTLSExpiredServer: a server certificate that expired is refused, and
// the error says so.
func TestTLSExpiredServer(t *testing.T) {
	t.Parallel()
	p := testbroker.NewPKI(t)
	p.ServerCert, p.ServerKey = p.ExpiredServerCert, p.ExpiredServerKey
	srv := testbroker.RedisTLS(t, p, false)
	_, err := outboxredis.NewPublisher(t.Context(), outboxredis.PublisherConfig{URL: "rediss://" + srv.Addr() + "?dial_timeout=3s&tls_ca=" + p.CA})
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("NewPublisher to a server with an expired certificate = %v, want an error about the expiry", err)
	}
}

// TestCluster: with cluster=true the relay's publisher and the subscriber
// work through a Redis Cluster of three masters.
func TestCluster(t *testing.T) {
	t.Parallel()
	addrs := testbroker.RedisCluster(t)
	url := fmt.Sprintf("redis://%s?cluster=true&addr=%s&addr=%s", addrs[0], addrs[1], addrs[2])
	for _, topic := range []string{"orders", "payments", "shipping"} { // spread over the slots
		roundTrip(t, url, topic)
	}
	_, err := outboxredis.NewSubscriber(t.Context(), outboxredis.SubscriberConfig{URL: url + "&stream=s:{topic}", Group: "g", Topic: "x"})
	if !errors.Is(err, outboxredis.ErrConfig) || !strings.Contains(err.Error(), "hash tag") {
		t.Fatalf("a stream template without a hash tag in a Cluster = %v, want ErrConfig about the hash tag", err)
	}
}

// TestSentinel: with sentinel_master the client finds the master through a
// Redis Sentinel.
func TestSentinel(t *testing.T) {
	t.Parallel()
	sentinel, _ := testbroker.RedisSentinel(t, "outboxmaster")
	roundTrip(t, "redis://"+sentinel+"?sentinel_master=outboxmaster", "sentinel")
}

// TestParseURL: ParseURL moves this package's parameters into fields, and
// what it returns connects.
func TestParseURLConfig(t *testing.T) {
	t.Parallel()
	cfg, err := outboxredis.ParseURL("redis://127.0.0.1:6379/0?stream=p:{topic}&maxlen=10&dial_timeout=3s")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Stream != "p:{topic}" || cfg.MaxLen != 10 || cfg.URL != "redis://127.0.0.1:6379/0?dial_timeout=3s" {
		t.Fatalf("ParseURL = %+v", cfg)
	}
	if _, err := outboxredis.ParseURL("redis://127.0.0.1:6379/0?cluster=yes please"); !errors.Is(err, outboxredis.ErrConfig) {
		t.Fatalf("cluster=%q: %v, want ErrConfig", "yes please", err)
	}
}

package outboxmqtt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testbroker"
)

// TestTLSParameters: mqtts:// with the TLS parameters reaches a mosquitto
// that listens with TLS only and requires a client certificate; every
// mistake is an error that names it.
func TestTLSParameters(t *testing.T) {
	t.Parallel()
	p := testbroker.NewPKI(t)
	m := testbroker.MosquittoTLS(t, p, true, "")
	base := "mqtts://" + m.Addr() + "?dial_timeout=3s"
	good := base + "&tls_ca=" + p.CA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey
	ctx := testCtx(t, 30*time.Second)

	sub, err := NewSubscriber(ctx, SubscriberConfig{URL: good, Group: "g", Name: "n", Topic: "tlsp"})
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	defer sub.Close()
	cfg, err := ParseURL(good + "&no_subscribers=fail")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS == nil || strings.Contains(cfg.URL, "?") || cfg.ClientID != "" {
		t.Fatalf("ParseURL = %+v", cfg)
	}
	pub, err := NewPublisher(ctx, cfg)
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	defer pub.Close()
	batch := msgs("tlsp", "tlsp", 5)
	if errs := pub.Publish(ctx, batch); errs != nil {
		t.Fatal(errs)
	}
	got := &seen{ids: map[string]int{}}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sub.Run(runCtx, got.handler) }()
	got.waitAll(t, batch)
	stop()
	<-done

	for _, tc := range []struct {
		name, url, want string
		config          bool
	}{
		{"plain mqtt:// to the TLS listener", strings.Replace(base, "mqtts://", "mqtt://", 1), "", false},
		{"TLS parameters on mqtt://", strings.Replace(good, "mqtts://", "mqtt://", 1), "use mqtts://", true},
		{"wrong CA", base + "&tls_ca=" + p.OtherCA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey, "certificate signed by unknown authority", false},
		{"no client certificate", base + "&tls_ca=" + p.CA, "", false},
		{"expired client certificate", base + "&tls_ca=" + p.CA + "&tls_cert=" + p.ExpiredClientCert + "&tls_key=" + p.ExpiredClientKey, "expired", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub, err := NewPublisher(ctx, PublisherConfig{URL: tc.url})
			if err == nil {
				_ = pub.Close()
				t.Fatal("NewPublisher succeeded")
			}
			if got := errors.Is(err, ErrConfig); got != tc.config {
				t.Fatalf("errors.Is(ErrConfig) = %v, want %v: %v", got, tc.config, err)
			}
			if !tc.config && !outbox.IsUnavailable(err) {
				t.Fatalf("a failed handshake should be an unavailable broker: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestTLSExpiredServer: a broker whose certificate expired is refused, and
// the error says so.
func TestTLSExpiredServer(t *testing.T) {
	t.Parallel()
	p := testbroker.NewPKI(t)
	p.ServerCert, p.ServerKey = p.ExpiredServerCert, p.ExpiredServerKey
	m := testbroker.MosquittoTLS(t, p, false, "")
	_, err := NewPublisher(testCtx(t, 10*time.Second), PublisherConfig{URL: "mqtts://" + m.Addr() + "?dial_timeout=2s&tls_ca=" + p.CA})
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("NewPublisher to a broker with an expired certificate = %v, want an error about the expiry", err)
	}
}

package outboxamqp_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
	"github.com/outbox-go/outbox/broker/outboxamqp/rabbittest"
	"github.com/outbox-go/outbox/internal/testbroker"
)

// TestTLS: amqps:// with the TLS parameters (and RabbitMQ's own names for
// them) reaches a private node that listens with TLS only and requires a
// client certificate; every mistake is an error that names it.
func TestTLS(t *testing.T) {
	t.Parallel()
	p := testbroker.NewPKI(t)
	pair, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	client := &tls.Config{RootCAs: p.Pool(), Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	node := rabbittest.StartTLS(t, p.CA, p.ServerCert, p.ServerKey, client)
	base := node.URL + "?connection_timeout=3000&exchange=tls"
	for _, files := range []string{
		"&tls_ca=" + p.CA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey,
		"&cacertfile=" + p.CA + "&certfile=" + p.ClientCert + "&keyfile=" + p.ClientKey,
	} {
		pub, err := outboxamqp.NewPublisher(t.Context(), outboxamqp.PublisherConfig{URL: base + files})
		if err != nil {
			t.Fatalf("NewPublisher with %s: %v", files, err)
		}
		_ = pub.Close()
	}
	sub, err := outboxamqp.NewSubscriber(t.Context(), outboxamqp.SubscriberConfig{URL: base + "&tls_ca=" + p.CA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey, Group: "g"})
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	defer sub.Close()
	pub, err := outboxamqp.NewPublisher(t.Context(), outboxamqp.PublisherConfig{URL: base, TLS: client})
	if err != nil {
		t.Fatalf("NewPublisher with PublisherConfig.TLS: %v", err)
	}
	defer pub.Close()
	msg := outbox.Message{MsgID: "tls-1", Topic: "t", Payload: []byte(`{"n":1}`), CreatedAt: time.Now()}
	if errs := pub.Publish(t.Context(), []outbox.Message{msg}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	got := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(ctx, func(_ context.Context, m outbox.Message) error {
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
	cancel()
	<-done

	plain := strings.Replace(base, "amqps://", "amqp://", 1)
	for _, tc := range []struct {
		name, url, want string
		config          bool
	}{
		{"plain amqp:// to the TLS listener", plain, "", false},
		{"TLS parameters on amqp://", plain + "&tls_ca=" + p.CA, "use amqps://", true},
		{"wrong CA", base + "&tls_ca=" + p.OtherCA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey, "certificate signed by unknown authority", false},
		{"no client certificate", base + "&tls_ca=" + p.CA, "", false},
		{"expired client certificate", base + "&tls_ca=" + p.CA + "&tls_cert=" + p.ExpiredClientCert + "&tls_key=" + p.ExpiredClientKey, "expired", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub, err := outboxamqp.NewPublisher(t.Context(), outboxamqp.PublisherConfig{URL: tc.url})
			if err == nil {
				_ = pub.Close()
				t.Fatal("NewPublisher succeeded")
			}
			if got := errors.Is(err, outboxamqp.ErrConfig); got != tc.config {
				t.Fatalf("errors.Is(ErrConfig) = %v, want %v: %v", got, tc.config, err)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "guest:guest") {
				t.Fatalf("error %q, want it to contain %q and no password", err, tc.want)
			}
		})
	}
}

// TestParseURLFieldsWin: ParseURL moves the parameters into fields, and
// NoDeclare set by the URL can be turned off.
func TestParseURLFieldsWin(t *testing.T) {
	t.Parallel()
	cfg, err := outboxamqp.ParseURL("amqp://guest:guest@127.0.0.1:5672/?declare=false&exchange=pu&heartbeat=5")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.NoDeclare || cfg.Exchange != "pu" || cfg.URL != "amqp://guest:guest@127.0.0.1:5672/?heartbeat=5" {
		t.Fatalf("ParseURL = %+v", cfg)
	}
	cfg.Exchange = "outboxtest-parseurl"
	cfg.NoDeclare = false // declares the exchange, which does not exist yet
	pub, err := outboxamqp.NewPublisher(t.Context(), cfg)
	if err != nil {
		t.Fatalf("NewPublisher after turning NoDeclare off: %v", err)
	}
	_ = pub.Close()
}

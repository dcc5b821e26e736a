package outboxkafka_test

import (
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
	"github.com/outbox-go/outbox/internal/testbroker"
)

// tlsCluster starts a kfake cluster that takes TLS only, with a server
// certificate of p, client certificates required, and SASL SCRAM-SHA-512.
func tlsCluster(t *testing.T, p *testbroker.PKI, serverCert, serverKey string) string {
	t.Helper()
	srv := p.ServerTLS(t, true)
	pair, err := tls.LoadX509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	srv.Certificates = []tls.Certificate{pair}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(srv), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", "alice", "s3cret-pw"), kfake.SeedTopics(1, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// TestTLSAndSASL: the URL's TLS parameters and SCRAM credentials reach a
// cluster that takes nothing else, and every way of getting TLS wrong is an
// error that names the problem, with no plain-text attempt that succeeds.
func TestTLSAndSASL(t *testing.T) {
	t.Parallel()
	p := testbroker.NewPKI(t)
	addr := tlsCluster(t, p, p.ServerCert, p.ServerKey)
	base := "kafka://alice:s3cret-pw@" + addr + "?sasl=scram-sha-512&dial_timeout=3s"
	files := "&tls_ca=" + p.CA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey

	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: base + files, Destination: "tls"})
	msg := outbox.Message{MsgID: "tls-1", Topic: "tls", Payload: []byte(`{"n":1}`), CreatedAt: time.Now()}
	if errs := pub.Publish(t.Context(), []outbox.Message{msg}); errs != nil {
		t.Fatalf("Publish over TLS and SCRAM: %v", errs)
	}
	// Read it back with a client of the test's own.
	clientTLS := &tls.Config{RootCAs: p.Pool(), MinVersion: tls.VersionTLS12}
	pair, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	clientTLS.Certificates = []tls.Certificate{pair}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(clientTLS),
		kgo.SASL(scram.Auth{User: "alice", Pass: "s3cret-pw"}.AsSha512Mechanism()), kgo.ConsumeTopics("tls"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	fetches := cl.PollFetches(t.Context())
	if err := fetches.Err(); err != nil {
		t.Fatal(err)
	}
	if recs := fetches.Records(); len(recs) != 1 || string(recs[0].Value) != `{"n":1}` {
		t.Fatalf("read back %d records, want the one published", len(recs))
	}

	// The same, with the client given in Go: the publisher uses it as is.
	own := newPublisher(t, outboxkafka.PublisherConfig{Client: cl, Destination: "tls"})
	msg.MsgID = "tls-2"
	if errs := own.Publish(t.Context(), []outbox.Message{msg}); errs != nil {
		t.Fatalf("Publish with the caller's client: %v", errs)
	}
	_ = own.Close() // leaves cl open: the deferred Close closes it

	for _, tc := range []struct {
		name, url, want string
		config          bool // an ErrConfig, before any connection
	}{
		{"plain text to a TLS listener", base, "", false},
		{"wrong CA", base + "&tls_ca=" + p.OtherCA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey, "certificate signed by unknown authority", false},
		{"no client certificate", base + "&tls_ca=" + p.CA, "", false},
		{"expired client certificate", base + "&tls_ca=" + p.CA + "&tls_cert=" + p.ExpiredClientCert + "&tls_key=" + p.ExpiredClientKey, "expired", true},
		{"missing CA file", base + "&tls_ca=" + p.Dir + "/nope.pem", `tls_ca "` + p.Dir + `/nope.pem" cannot be read: no such file`, true},
		{"certificate without key", base + "&tls_cert=" + p.ClientCert, "tls_cert and tls_key go together", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := outboxkafka.NewPublisher(t.Context(), outboxkafka.PublisherConfig{URL: tc.url})
			if err == nil {
				t.Fatal("NewPublisher succeeded")
			}
			if got := errors.Is(err, outboxkafka.ErrConfig); got != tc.config {
				t.Fatalf("errors.Is(ErrConfig) = %v, want %v: %v", got, tc.config, err)
			}
			if !tc.config && !outbox.IsUnavailable(err) {
				t.Fatalf("a handshake failure should be an unavailable broker: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret-pw") {
				t.Fatalf("error %q, want it to contain %q and no password", err, tc.want)
			}
		})
	}
}

// TestTLSExpiredServer: a server whose certificate expired is refused with
// an error that says so.
func TestTLSExpiredServer(t *testing.T) {
	t.Parallel()
	p := testbroker.NewPKI(t)
	addr := tlsCluster(t, p, p.ExpiredServerCert, p.ExpiredServerKey)
	_, err := outboxkafka.NewPublisher(t.Context(), outboxkafka.PublisherConfig{
		URL: "kafka://alice:s3cret-pw@" + addr + "?sasl=scram-sha-512&dial_timeout=3s&tls_ca=" + p.CA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey})
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("NewPublisher to a server with an expired certificate = %v, want an error about the expiry", err)
	}
}

// TestParseURLFieldsWin: a config from ParseURL carries the URL's
// parameters, and a field changed afterwards wins, a boolean included.
func TestParseURLFieldsWin(t *testing.T) {
	t.Parallel()
	cfg, err := outboxkafka.ParseURL(brokerURL + "?auto_create=true&topic=x.{topic}&timeout=3s&tls_server_name=kafka.example")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.AutoCreateTopics || cfg.Destination != "x.{topic}" || cfg.Timeout != 3*time.Second || cfg.TLS == nil || cfg.TLS.ServerName != "kafka.example" {
		t.Fatalf("ParseURL = %+v", cfg)
	}
	if strings.Contains(cfg.URL, "?") {
		t.Fatalf("ParseURL left parameters in URL: %s", cfg.URL)
	}
	cfg.AutoCreateTopics = false
	cfg.TLS = nil
	pub := newPublisher(t, cfg)
	errs := pub.Publish(t.Context(), []outbox.Message{{MsgID: "a", Topic: "not-there", Payload: []byte(`{}`), CreatedAt: time.Now()}})
	if errs == nil || !errors.Is(errs[0], outboxkafka.ErrUnknownTopic) {
		t.Fatalf("with AutoCreateTopics turned off after ParseURL, a missing topic = %v, want ErrUnknownTopic", errs)
	}
	if _, err := outboxkafka.ParseURL(brokerURL + "?tls_ca=x&tls=false"); !errors.Is(err, outboxkafka.ErrConfig) {
		t.Fatalf("tls=false with tls_ca = %v, want ErrConfig", err)
	}
}

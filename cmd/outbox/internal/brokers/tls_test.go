package brokers

import (
	"strings"
	"testing"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/testbroker"
)

func TestBrokerTLSFlagsApply(t *testing.T) {
	t.Parallel()
	b := &TLSFlags{ca: "/etc/ca dir/ca.pem", cert: "/c.pem", key: "/k.pem", serverName: "broker.example"}
	for in, want := range map[string]string{
		"kafka://h:9092":                         "kafka://h:9092?tls_ca=%2Fetc%2Fca+dir%2Fca.pem&tls_cert=%2Fc.pem&tls_key=%2Fk.pem&tls_server_name=broker.example",
		"amqps://u:p@h/?cacertfile=/mine.pem":    "amqps://u:p@h/?cacertfile=/mine.pem&tls_cert=%2Fc.pem&tls_key=%2Fk.pem&tls_server_name=broker.example",
		"nats://a:1,nats://b:2?tls_ca=/u.pem&x=": "nats://a:1,nats://b:2?tls_ca=/u.pem&x=&tls_cert=%2Fc.pem&tls_key=%2Fk.pem&tls_server_name=broker.example",
		"discard:":                               "discard:",
	} {
		if got := b.Apply(in); got != want {
			t.Errorf("apply(%q) = %q, want %q", in, got, want)
		}
	}
	if got := (&TLSFlags{}).Apply("redis://h"); got != "redis://h" {
		t.Errorf("no flags changed the URL: %q", got)
	}
}

// TestBrokerTLSFlagsNATS: tls:// is a broker URL of the command line, and
// the --broker-tls-* flags reach a NATS server that requires TLS and a
// client certificate.
func TestBrokerTLSFlagsNATS(t *testing.T) {
	t.Parallel()
	p := testbroker.NewPKI(t)
	srv := testbroker.NATS(t, testbroker.NATSTLS(p, true))
	url := "tls://" + srv.Addr() + "?stream=CLITLS&subject=clitls.{topic}&timeout=3s"
	if !IsBrokerURL(url) {
		t.Fatal("tls:// is not taken for a broker URL")
	}
	_, _, err := Open(t.Context(), url, PublisherOptions{})
	if err == nil || !outbox.IsUnavailable(err) {
		t.Fatalf("without the CA: %v, want an unreachable broker", err)
	}
	flags := &TLSFlags{ca: p.CA, cert: p.ClientCert, key: p.ClientKey}
	pub, closePub, err := Open(t.Context(), flags.Apply(url), PublisherOptions{})
	if err != nil {
		t.Fatalf("with --broker-tls-*: %v", err)
	}
	defer closePub()
	if errs := pub.Publish(t.Context(), []outbox.Message{{MsgID: "cli-tls", Topic: "t", Payload: []byte(`{}`)}}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	_, _, err = Open(t.Context(), strings.Replace(url, "tls://", "redis://", 1)+"&tls_ca="+p.CA, PublisherOptions{})
	if err == nil || !strings.Contains(err.Error(), "rediss://") {
		t.Fatalf("TLS files with redis:// = %v, want an error asking for rediss://", err)
	}
}

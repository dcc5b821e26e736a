package outboxmqtt

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

// TestTLS: mqtts:// URLs connect with TLS, checking the broker's certificate.
func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pool := writeCert(t, dir)
	m := startMosquitto(t, "cafile "+filepath.Join(dir, "cert.pem")+
		"\ncertfile "+filepath.Join(dir, "cert.pem")+"\nkeyfile "+filepath.Join(dir, "key.pem"))
	url := "mqtts://" + m.Addr()
	ctx := testCtx(t, 30*time.Second)

	// Without the CA the handshake fails; the publisher reports it as an
	// unreachable broker, naming the cause.
	_, err := NewPublisher(ctx, PublisherConfig{URL: url + "?connect_timeout=5s"})
	if !outbox.IsUnavailable(err) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("NewPublisher without the CA = %v, want an unavailable error about the certificate", err)
	}

	tlsCfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	sub, err := NewSubscriber(ctx, SubscriberConfig{URL: url, Group: "g", Name: "n", Topic: "tls", TLS: tlsCfg})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	pub, err := NewPublisher(ctx, PublisherConfig{URL: url, TLS: tlsCfg})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	batch := msgs("tls", "tls", 50)
	if errs := pub.Publish(ctx, batch); errs != nil {
		t.Fatal(errs)
	}
	got := &seen{ids: map[string]int{}}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sub.Run(runCtx, got.handler) }()
	got.waitAll(t, batch)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and its key to
// dir, and returns a pool that trusts it.
func writeCert(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "outboxmqtt test broker"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := errors.Join(
		os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o644),
		os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600),
	); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return pool
}

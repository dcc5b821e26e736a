package testbroker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a certificate authority made for one test, with certificates it
// signed, each written as a PEM file in Dir.
type PKI struct {
	Dir string
	// CA is the file of the CA certificate.
	CA string
	// OtherCA is the file of a CA that signed none of the certificates.
	OtherCA string
	// ServerCert and ServerKey are valid for 127.0.0.1, ::1 and localhost.
	ServerCert, ServerKey string
	// ExpiredServerCert and ExpiredServerKey are like ServerCert, expired.
	ExpiredServerCert, ExpiredServerKey string
	// ClientCert and ClientKey are a client certificate (CN "outbox").
	ClientCert, ClientKey string
	// ExpiredClientCert and ExpiredClientKey are an expired client certificate.
	ExpiredClientCert, ExpiredClientKey string

	pool *x509.CertPool
}

// NewPKI makes a CA and its certificates in a temporary folder.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	p := &PKI{Dir: t.TempDir()}
	caKey, caCert := p.selfSigned(t, "outbox test CA", "ca")
	p.CA = filepath.Join(p.Dir, "ca.pem")
	_, _ = p.selfSigned(t, "outbox other CA", "other-ca")
	p.OtherCA = filepath.Join(p.Dir, "other-ca.pem")
	p.pool = x509.NewCertPool()
	p.pool.AddCert(caCert)
	now := time.Now()
	p.ServerCert, p.ServerKey = p.leaf(t, caKey, caCert, "server", "localhost", now.Add(-time.Hour), now.Add(24*time.Hour), x509.ExtKeyUsageServerAuth)
	p.ExpiredServerCert, p.ExpiredServerKey = p.leaf(t, caKey, caCert, "expired-server", "localhost", now.Add(-48*time.Hour), now.Add(-24*time.Hour), x509.ExtKeyUsageServerAuth)
	p.ClientCert, p.ClientKey = p.leaf(t, caKey, caCert, "client", "outbox", now.Add(-time.Hour), now.Add(24*time.Hour), x509.ExtKeyUsageClientAuth)
	p.ExpiredClientCert, p.ExpiredClientKey = p.leaf(t, caKey, caCert, "expired-client", "outbox", now.Add(-48*time.Hour), now.Add(-24*time.Hour), x509.ExtKeyUsageClientAuth)
	return p
}

// Pool returns a pool holding the CA.
func (p *PKI) Pool() *x509.CertPool { return p.pool }

// ServerTLS returns a server configuration with ServerCert that requires a
// client certificate signed by the CA when requireClient is set.
func (p *PKI) ServerTLS(t testing.TB, requireClient bool) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: p.pool, MinVersion: tls.VersionTLS12}
	if requireClient {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg
}

func (p *PKI) selfSigned(t testing.TB, cn, name string) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(48 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p.write(t, name+".pem", "CERTIFICATE", der)
	return key, cert
}

func (p *PKI) leaf(t testing.TB, caKey *ecdsa.PrivateKey, ca *x509.Certificate, name, cn string, from, until time.Time, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    from,
		NotAfter:     until,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "PRIVATE KEY", keyDER)
}

func (p *PKI) write(t testing.TB, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.Dir, name)
	// 0o644: the brokers may run as another user (mosquitto, rabbitmq) and
	// must read their certificate and key; the folder is the test's own.
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o644); err != nil { //nolint:gosec // see above
		t.Fatal(err)
	}
	return path
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

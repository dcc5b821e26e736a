//go:build !nodevbrokers

package brokers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/outbox-go/outbox"
)

// startNATSOperator starts a private NATS server in operator (JWT) mode that
// trusts one operator and one account of it, which may use JetStream. It
// returns the server's URL and the account's key, which signs users.
func startNATSOperator(t *testing.T) (string, nkeys.KeyPair) {
	t.Helper()
	op := mustKey(t, nkeys.CreateOperator)
	opClaims := jwt.NewOperatorClaims(publicKey(t, op))
	opClaims.Name = "outbox-test"
	acct := mustKey(t, nkeys.CreateAccount)
	ac := jwt.NewAccountClaims(publicKey(t, acct))
	ac.Name = "app"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	acctJWT, err := ac.Encode(op)
	mustOK(t, err)
	sys := mustKey(t, nkeys.CreateAccount) // JetStream needs a system account
	sysClaims := jwt.NewAccountClaims(publicKey(t, sys))
	sysClaims.Name = "SYS"
	sysJWT, err := sysClaims.Encode(op)
	mustOK(t, err)
	resolver := &server.MemAccResolver{}
	mustOK(t, resolver.Store(publicKey(t, acct), acctJWT))
	mustOK(t, resolver.Store(publicKey(t, sys), sysJWT))
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: t.TempDir(),
		TrustedOperators: []*jwt.OperatorClaims{opClaims}, AccountResolver: resolver, SystemAccount: publicKey(t, sys),
	})
	mustOK(t, err)
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("the private NATS server did not start")
	}
	return srv.ClientURL(), acct
}

// writeCreds writes a .creds file for a new user signed by signer, expiring
// at expires unless it is zero, and returns its path and the user's seed.
func writeCreds(t *testing.T, signer nkeys.KeyPair, expires time.Time) (string, string) {
	t.Helper()
	user := mustKey(t, nkeys.CreateUser)
	uc := jwt.NewUserClaims(publicKey(t, user))
	if !expires.IsZero() {
		uc.Expires = expires.Unix()
	}
	userJWT, err := uc.Encode(signer)
	mustOK(t, err)
	seed, err := user.Seed()
	mustOK(t, err)
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	mustOK(t, err)
	path := filepath.Join(t.TempDir(), "user.creds")
	mustOK(t, os.WriteFile(path, creds, 0o600))
	return path, string(seed)
}

// TestNATSCreds: the broker URL's creds parameter logs in to a server in
// operator mode and publishes to JetStream; creds the server does not trust,
// or that expired, are refused with an error that shows no seed.
func TestNATSCreds(t *testing.T) {
	t.Parallel()
	url, acct := startNATSOperator(t)
	brokerURL := func(creds string) string {
		return url + "?creds=" + creds + "&subject=creds.{topic}&stream=CREDS&dial_timeout=3s"
	}
	good, _ := writeCreds(t, acct, time.Time{})
	pub, closePub, err := Open(t.Context(), brokerURL(good), PublisherOptions{})
	if err != nil {
		t.Fatalf("open the publisher with good creds: %v", err)
	}
	defer closePub()
	msg := outbox.Message{MsgID: "creds-1", Topic: "orders", Payload: []byte(`{"n":1}`), CreatedAt: time.Now()}
	if errs := pub.Publish(t.Context(), []outbox.Message{msg}); errs != nil {
		t.Fatalf("publish with good creds: %v", errs)
	}

	other := mustKey(t, nkeys.CreateAccount) // an account the server does not know
	untrusted, seed1 := writeCreds(t, other, time.Time{})
	expired, seed2 := writeCreds(t, acct, time.Now().Add(-time.Hour))
	for name, c := range map[string]struct{ path, seed string }{"untrusted": {untrusted, seed1}, "expired": {expired, seed2}} {
		_, closeFn, err := Open(t.Context(), brokerURL(c.path), PublisherOptions{})
		if err == nil {
			closeFn()
			t.Errorf("%s creds: the publisher opened", name)
			continue
		}
		if msg := err.Error(); !strings.Contains(strings.ToLower(msg), "authorization") || strings.Contains(msg, c.seed) {
			t.Errorf("%s creds: error %q: want an authorization refusal and no seed", name, msg)
		}
	}
	_, _, err = Open(t.Context(), brokerURL(filepath.Join(t.TempDir(), "missing.creds")), PublisherOptions{})
	if err == nil || !strings.Contains(err.Error(), "missing.creds") {
		t.Errorf("a missing creds file: %v, want an error naming it", err)
	}
}

func mustKey(t *testing.T, create func() (nkeys.KeyPair, error)) nkeys.KeyPair {
	t.Helper()
	kp, err := create()
	mustOK(t, err)
	return kp
}

func publicKey(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	mustOK(t, err)
	return pub
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

package outboxnats_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxnats"
	"github.com/outbox-go/outbox/internal/testbroker"
)

// nkeyUser makes a user nkey, writes its seed to a file and returns the
// file and the public key the server's configuration names.
func nkeyUser(t *testing.T) (seedFile, public string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	public, err = kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	seedFile = filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return seedFile, public
}

// TestTLSAndNKey: tls:// with the TLS parameters and an nkey seed file
// reach a server that requires TLS, a client certificate and the nkey;
// every mistake is an error that names it.
func TestTLSAndNKey(t *testing.T) {
	t.Parallel()
	p := testbroker.NewPKI(t)
	seed, public := nkeyUser(t)
	srv := testbroker.NATS(t, testbroker.NATSTLS(p, true)+fmt.Sprintf("authorization { users = [ { nkey: %q } ] }\n", public))
	base := "tls://" + srv.Addr() + "?stream=TLS&subject=tls.{topic}&timeout=3s"
	good := base + "&tls_ca=" + p.CA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey + "&nkey=" + seed

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sub, err := outboxnats.NewSubscriber(ctx, outboxnats.SubscriberConfig{URL: good, Group: "g"})
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	defer sub.Close()
	pub, err := outboxnats.NewPublisher(ctx, outboxnats.PublisherConfig{URL: good})
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	defer pub.Close()
	msg := outbox.Message{MsgID: "tls-1", Topic: "a", Payload: []byte(`{"n":1}`), CreatedAt: time.Now()}
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
	<-done

	for _, tc := range []struct {
		name, url, want string
		config          bool
	}{
		{"plain nats:// without TLS settings", strings.Replace(base, "tls://", "nats://", 1) + "&nkey=" + seed, "", false},
		{"wrong CA", base + "&tls_ca=" + p.OtherCA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey + "&nkey=" + seed, "certificate signed by unknown authority", false},
		{"no nkey", base + "&tls_ca=" + p.CA + "&tls_cert=" + p.ClientCert + "&tls_key=" + p.ClientKey, "uthorization", false},
		{"expired client certificate", base + "&tls_ca=" + p.CA + "&tls_cert=" + p.ExpiredClientCert + "&tls_key=" + p.ExpiredClientKey, "expired", true},
		{"missing seed file", base + "&tls_ca=" + p.CA + "&nkey=" + p.Dir + "/none.nk", "nkey seed file", true},
		{"typo", good + "&tls_cafile=x", `did you mean "tls_ca"?`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := outboxnats.NewPublisher(t.Context(), outboxnats.PublisherConfig{URL: tc.url})
			if err == nil {
				t.Fatal("NewPublisher succeeded")
			}
			if got := errors.Is(err, outboxnats.ErrConfig); got != tc.config {
				t.Fatalf("errors.Is(ErrConfig) = %v, want %v: %v", got, tc.config, err)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "SU") {
				t.Fatalf("error %q, want it to contain %q and no seed", err, tc.want)
			}
		})
	}

	// The caller's connection: the publisher uses it and leaves it open.
	nc, err := nats.Connect("tls://"+srv.Addr(), nats.RootCAs(p.CA), nats.ClientCert(p.ClientCert, p.ClientKey), mustNkey(t, seed))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	own, err := outboxnats.NewPublisher(ctx, outboxnats.PublisherConfig{URL: "?stream=TLS&subject=tls.{topic}", Conn: nc})
	if err != nil {
		t.Fatalf("NewPublisher with Conn: %v", err)
	}
	msg.MsgID = "tls-2"
	if errs := own.Publish(ctx, []outbox.Message{msg}); errs != nil {
		t.Fatalf("Publish with Conn: %v", errs)
	}
	_ = own.Close()
	if nc.IsClosed() {
		t.Fatal("Close closed the caller's connection")
	}
}

func mustNkey(t *testing.T, seedFile string) nats.Option {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	return opt
}

// TestTLSExpiredServer: a server whose certificate expired is refused with
// an error that says so.
func TestTLSExpiredServer(t *testing.T) {
	t.Parallel()
	p := testbroker.NewPKI(t)
	p.ServerCert, p.ServerKey = p.ExpiredServerCert, p.ExpiredServerKey
	srv := testbroker.NATS(t, testbroker.NATSTLS(p, false))
	_, err := outboxnats.NewPublisher(t.Context(), outboxnats.PublisherConfig{URL: "tls://" + srv.Addr() + "?timeout=3s&tls_ca=" + p.CA})
	if err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("NewPublisher to a server with an expired certificate = %v, want an error about the expiry", err)
	}
}

// TestParseURLFieldsWin: ParseURL moves the parameters into fields, and a
// boolean the URL turned on can be turned off.
func TestParseURLFieldsWin(t *testing.T) {
	t.Parallel()
	cfg, err := outboxnats.ParseURL("nats://127.0.0.1:4222?storage=memory&stream=X&timeout=2s&tls_server_name=nats.example")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.MemoryStorage || cfg.Stream != "X" || cfg.Timeout != 2*time.Second || cfg.TLS == nil || cfg.TLS.ServerName != "nats.example" || cfg.URL != "nats://127.0.0.1:4222" {
		t.Fatalf("ParseURL = %+v", cfg)
	}
	if _, err := outboxnats.ParseURL("nats://127.0.0.1:4222?creds=a&nkey=b"); !errors.Is(err, outboxnats.ErrConfig) {
		t.Fatalf("creds and nkey together = %v, want ErrConfig", err)
	}
}

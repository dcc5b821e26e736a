package outboxamqp

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox"
)

func noDial(context.Context) (*amqp.Connection, error) { return nil, errors.New("not called") }

// TestDialSettings checks what a config with Dial takes from its URL: the
// query parameters and connection_timeout apply, the fields win over them,
// and the connection's own parameters are not used.
func TestDialSettings(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"", "?exchange=orders&connection_timeout=2000&heartbeat=3",
		"amqps://u:secret@elsewhere:5671/v?exchange=orders&connection_timeout=2000&tls_ca=/nonexistent.pem"} {
		s, err := PublisherConfig{URL: raw, Dial: noDial, RoutingKey: "ev.{topic}", TLS: &tls.Config{}}.settings()
		if err != nil {
			t.Fatalf("URL %q: %v", raw, err)
		}
		if s.tls != nil || s.redacted != hookBroker || s.dialHook == nil {
			t.Errorf("URL %q: tls %v, broker %q: the Dial hook's connection should not use them", raw, s.tls, s.redacted)
		}
		if raw == "" {
			if s.exchange != DefaultExchange || s.dialTimeout != DefaultDialTimeout {
				t.Errorf("empty URL: exchange %q, dial timeout %s, want the defaults", s.exchange, s.dialTimeout)
			}
			continue
		}
		if s.exchange != "orders" || s.routingKey != "ev.{topic}" || s.dialTimeout != 2*time.Second {
			t.Errorf("URL %q: exchange %q, routing key %q, dial timeout %s", raw, s.exchange, s.routingKey, s.dialTimeout)
		}
	}
	s, err := SubscriberConfig{URL: "?exchange=orders&queue=q1", Group: "g", Queue: "q2", Dial: noDial}.settings()
	if err != nil {
		t.Fatal(err)
	}
	if s.exchange != "orders" || s.queue != "q2" || s.dialHook == nil {
		t.Errorf("subscriber: exchange %q, queue %q; want orders and the field's q2", s.exchange, s.queue)
	}
	for _, raw := range []string{"?exchnge=x", "?exchange=%zz", "?exchange_type=queue"} {
		if _, err := (PublisherConfig{URL: raw, Dial: noDial}).settings(); !errors.Is(err, ErrConfig) {
			t.Errorf("URL %q with Dial: %v, want ErrConfig", raw, err)
		}
	}
	if _, err := (PublisherConfig{URL: "?exchange=x"}).settings(); !errors.Is(err, ErrConfig) {
		t.Errorf("a query-only URL without Dial: %v, want ErrConfig", err)
	}
}

// TestDialErrors checks how callDial reports a hook that fails, hangs or
// returns nothing.
func TestDialErrors(t *testing.T) {
	t.Parallel()
	late := make(chan struct{})
	defer func() { <-late }() // goleak: the hook that hangs has returned
	for _, tc := range []struct {
		name    string
		hook    func(context.Context) (*amqp.Connection, error)
		refused bool
	}{
		{"error", func(context.Context) (*amqp.Connection, error) { return nil, errors.New("boom") }, false},
		{"refused", func(context.Context) (*amqp.Connection, error) { return nil, amqp.ErrCredentials }, true},
		{"nil", func(context.Context) (*amqp.Connection, error) { return nil, nil }, false},
		{"hangs", func(ctx context.Context) (*amqp.Connection, error) {
			defer close(late)
			time.Sleep(300 * time.Millisecond) // ignores ctx
			return nil, errors.New("late")
		}, false},
	} {
		s, err := PublisherConfig{Dial: tc.hook, DialTimeout: 50 * time.Millisecond}.settings()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = s.dial(context.Background(), "test")
		switch {
		case tc.refused && !errors.Is(err, ErrRefusedLogin):
			t.Errorf("%s: %v, want ErrRefusedLogin", tc.name, err)
		case !tc.refused && !outbox.IsUnavailable(err):
			t.Errorf("%s: %v, want outbox.Unavailable", tc.name, err)
		case time.Since(start) > 250*time.Millisecond:
			t.Errorf("%s: dial took %s, past DialTimeout", tc.name, time.Since(start))
		case !strings.Contains(err.Error(), "Dial"):
			t.Errorf("%s: %q does not name Dial", tc.name, err)
		}
	}
}

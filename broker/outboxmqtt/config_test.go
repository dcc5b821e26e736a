package outboxmqtt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

func TestPublisherConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  PublisherConfig
		want string
	}{
		{"empty URL", PublisherConfig{}, "URL is empty"},
		{"scheme", PublisherConfig{URL: "tcp://localhost:1883"}, `has scheme "tcp"; use mqtt:// or mqtts://`},
		{"no host", PublisherConfig{URL: "mqtt://"}, "has no host"},
		{"path", PublisherConfig{URL: "mqtt://localhost/orders"}, `has a path "/orders"`},
		{"unknown param", PublisherConfig{URL: "mqtt://localhost?topics=x/{topic}"}, `unknown URL parameter "topics"; did you mean "topic"?`},
		{"param twice", PublisherConfig{URL: "mqtt://localhost?qos=1&qos=2"}, `URL parameter "qos" is given 2 times`},
		{"qos 0 in URL", PublisherConfig{URL: "mqtt://localhost?qos=0"}, "QoS 0 is not supported"},
		{"qos 0 in field", PublisherConfig{URL: "mqtt://localhost", QoS: -1}, "QoS 0 is not supported"},
		{"qos 3", PublisherConfig{URL: "mqtt://localhost?qos=3"}, "QoS 3 does not exist"},
		{"qos 2 without no_subscribers=ok", PublisherConfig{URL: "mqtt://localhost?qos=2"}, "qos=2 needs no_subscribers=ok"},
		{"qos not a number", PublisherConfig{URL: "mqtt://localhost?qos=one"}, `qos="one" is not a positive integer`},
		{"template without placeholder", PublisherConfig{URL: "mqtt://localhost?topic=outbox/all"}, `has no {topic}`},
		{"template with wildcard", PublisherConfig{URL: "mqtt://localhost", TopicTemplate: "outbox/+/{topic}"}, "contains a wildcard"},
		{"window", PublisherConfig{URL: "mqtt://localhost?window=-2"}, `window="-2" is not a positive integer`},
		{"no_subscribers", PublisherConfig{URL: "mqtt://localhost?no_subscribers=maybe"}, `no_subscribers is "maybe"`},
		{"duration", PublisherConfig{URL: "mqtt://localhost?ack_timeout=5"}, `ack_timeout="5" is not a duration`},
		{"negative duration", PublisherConfig{URL: "mqtt://localhost", DialTimeout: -time.Second}, "DialTimeout (dial_timeout) is -1s"},
		{"keepalive too long", PublisherConfig{URL: "mqtt://localhost?keepalive=24h"}, "at most 18h12m15s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewPublisher(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewPublisher error = %v, want one containing %q", err, tc.want)
			}
			if outbox.IsUnavailable(err) {
				t.Errorf("a config error must not be outbox.Unavailable: %v", err)
			}
			if strings.Count(err.Error(), "\n") > 0 {
				t.Errorf("error spans several lines: %q", err)
			}
		})
	}
}

func TestSubscriberConfigErrors(t *testing.T) {
	t.Parallel()
	base := SubscriberConfig{URL: "mqtt://localhost", Group: "billing", Name: "m1", Topic: "order.paid"}
	with := func(f func(*SubscriberConfig)) SubscriberConfig {
		c := base
		f(&c)
		return c
	}
	tests := []struct {
		name string
		cfg  SubscriberConfig
		want string
	}{
		{"no group", with(func(c *SubscriberConfig) { c.Group = "" }), "Group is empty"},
		{"group with slash", with(func(c *SubscriberConfig) { c.Group = "a/b" }), "is not a valid share name"},
		{"group with wildcard", with(func(c *SubscriberConfig) { c.Group = "a+" }), "is not a valid share name"},
		{"no topic", with(func(c *SubscriberConfig) { c.Topic = "" }), "Topic is empty"},
		{"max deliveries", with(func(c *SubscriberConfig) { c.MaxDeliveries = -1 }), "MaxDeliveries is -1"},
		{"session expiry", with(func(c *SubscriberConfig) { c.SessionExpiry = time.Millisecond }), "SessionExpiry is 1ms"},
		{"dead topic wildcard", with(func(c *SubscriberConfig) { c.DeadLetterTopic = "dead/#" }), `dead-letter topic "dead/#" contains a wildcard`},
		{"dead topic placeholder", with(func(c *SubscriberConfig) { c.DeadLetterTopic = "dead/{topic}" }), "the only placeholder is {group}"},
		{"bad param", with(func(c *SubscriberConfig) { c.URL = "mqtt://localhost?max_deliveries=x" }), `max_deliveries="x" is not a positive integer`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewSubscriber(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewSubscriber error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestURLParameters(t *testing.T) {
	t.Parallel()
	s, err := PublisherConfig{URL: "mqtts://u:secret@broker.example?topic=events/{topic}&qos=2&window=50&client_id=relay-1&no_subscribers=ok&source=/orders&connect_timeout=3s&ack_timeout=4s&keepalive=5s"}.settings()
	if err != nil {
		t.Fatal(err)
	}
	if s.TopicTemplate != "events/{topic}" || s.QoS != 2 || s.Window != 50 || s.ClientID != "relay-1" ||
		s.NoSubscribers != NoSubscribersOK || s.Source != "/orders" || s.DialTimeout != 3*time.Second ||
		s.AckTimeout != 4*time.Second || s.KeepAlive != 5*time.Second {
		t.Errorf("parameters not applied: %+v", s.PublisherConfig)
	}
	if s.url.server.String() != "mqtts://broker.example:8883" || s.url.user != "u" || string(s.url.password) != "secret" {
		t.Errorf("server %s user %q", s.url.server, s.url.user)
	}
	if strings.Contains(s.url.redacted, "secret") {
		t.Errorf("redacted URL shows the password: %s", s.url.redacted)
	}

	// A config field wins over its parameter; zero fields take defaults.
	s, err = PublisherConfig{URL: "mqtt://localhost?window=50", Window: 7}.settings()
	if err != nil {
		t.Fatal(err)
	}
	if s.Window != 7 || s.QoS != 1 || s.TopicTemplate != DefaultTopicTemplate || s.NoSubscribers != NoSubscribersFail ||
		!strings.HasPrefix(s.ClientID, "outbox-relay-") || s.url.server.Host != "localhost:1883" {
		t.Errorf("defaults: %+v, host %s", s.PublisherConfig, s.url.server.Host)
	}

	sub, err := SubscriberConfig{URL: "mqtt://localhost?consume=%23&name=pod-0&max_deliveries=2&redelivery_delay=1s&dead_topic=dlq/{group}&session_expiry=1h", Group: "billing"}.settings()
	if err != nil {
		t.Fatal(err)
	}
	if sub.filter != "outbox/#" || sub.clientID != "outbox-billing-pod-0" || sub.MaxDeliveries != 2 ||
		sub.RedeliveryDelay != time.Second || sub.deadTopic != "dlq/billing" || sub.SessionExpiry != time.Hour {
		t.Errorf("subscriber parameters not applied: %+v", sub)
	}
}

func TestPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	// A broker that is not there: the error names it without the password.
	_, err := NewPublisher(context.Background(), PublisherConfig{URL: "mqtt://user:hunter2@127.0.0.1:1?connect_timeout=300ms"})
	if err == nil {
		t.Fatal("NewPublisher succeeded without a broker")
	}
	if !outbox.IsUnavailable(err) {
		t.Errorf("error %v should satisfy outbox.IsUnavailable", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error shows the password: %v", err)
	}
	_, err = NewPublisher(context.Background(), PublisherConfig{URL: "mqtt://user:hunter2@localhost:1883/%zz"})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %v shows the password (or is nil)", err)
	}
}

func TestBadCredentials(t *testing.T) {
	t.Parallel()
	// A private broker that lets nobody in.
	m := startMosquitto(t, "allow_anonymous false\npassword_file /dev/null")
	_, err := NewPublisher(context.Background(), PublisherConfig{URL: "mqtt://someone:wrong@" + m.Addr()})
	var ce *ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("NewPublisher error = %v, want a *ConnectError", err)
	}
	if outbox.IsUnavailable(err) || strings.Contains(err.Error(), "wrong") {
		t.Errorf("refused connection: %v (must not be Unavailable nor show the password)", err)
	}
}

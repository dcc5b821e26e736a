package outboxamqp

import (
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox/cloudevents"
)

func TestPublisherConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  PublisherConfig
		want string
	}{
		{PublisherConfig{}, "URL is empty"},
		{PublisherConfig{URL: "http://h/"}, `scheme "http"`},
		{PublisherConfig{URL: "amqp://u:secret@/"}, "no host"},
		{PublisherConfig{URL: "amqp://u:secret@h/?exchnge=x"}, `unknown URL parameter "exchnge"; did you mean "exchange"?`},
		{PublisherConfig{URL: "amqp://u:secret@h/?exchange_type=queue"}, `exchange_type "queue"`},
		{PublisherConfig{URL: "amqp://u:secret@h/?exchange=amq.mine"}, "reserved"},
		{PublisherConfig{URL: "amqp://u:secret@h/?declare=maybe"}, "declare"},
		{PublisherConfig{URL: "amqp://u:secret@h/?timeout=soon"}, "timeout"},
		{PublisherConfig{URL: "amqp://u:secret@h/?max_message_bytes=-1"}, "max_message_bytes"},
		{PublisherConfig{URL: "amqp://u:secret@h/?connection_timeout=x"}, "connection_timeout"},
		{PublisherConfig{URL: "amqp://u:secret@h/?heartbeat=x"}, "heartbeat"},
		{PublisherConfig{URL: "amqp://u:secret@h/", Timeout: -time.Second}, "timeout"},
		{PublisherConfig{URL: "amqp://u:secret@h/", RoutingKey: strings.Repeat("k", 200) + "{topic}"}, "routing key template"},
		{PublisherConfig{URL: "amqp://u:sec ret@h/"}, "not a valid URL"},
		{PublisherConfig{URL: "amqp://u:secret@h/", TLS: &tls.Config{}}, "amqps://"},
	} {
		_, err := tc.cfg.settings()
		if err == nil {
			t.Errorf("%+v: no error, want one about %q", tc.cfg, tc.want)
			continue
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %q, want ErrConfig about %q", tc.cfg, err, tc.want)
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "sec ret") {
			t.Errorf("error %q shows the password", err)
		}
	}
}

func TestSubscriberConfigErrors(t *testing.T) {
	t.Parallel()
	const u = "amqp://u:secret@h/"
	for _, tc := range []struct {
		cfg  SubscriberConfig
		want string
	}{
		{SubscriberConfig{URL: u}, "Group is empty"},
		{SubscriberConfig{URL: u + "?prefetch=0", Group: "g"}, "prefetch"},
		{SubscriberConfig{URL: u, Group: "g", Prefetch: 70000}, "65535"},
		{SubscriberConfig{URL: u + "?max_deliveries=none", Group: "g"}, "max_deliveries"},
		{SubscriberConfig{URL: u, Group: "g", MaxDeliveries: -2}, "max_deliveries"},
		{SubscriberConfig{URL: u, Group: "g", DeadLetterQueue: "g"}, "DeadLetterQueue"},
		{SubscriberConfig{URL: u, Group: "amq.g"}, "reserved"},
		{SubscriberConfig{URL: u, Group: strings.Repeat("g", 256)}, "255"},
		{SubscriberConfig{URL: u + "?reconnect_delay=1", Group: "g"}, "reconnect_delay"},
	} {
		_, err := tc.cfg.settings()
		if err == nil {
			t.Errorf("%+v: no error, want one about %q", tc.cfg, tc.want)
			continue
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%+v: error %q, want ErrConfig about %q without the password", tc.cfg, err, tc.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	p, err := PublisherConfig{URL: "amqp://guest:guest@localhost/"}.settings()
	if err != nil {
		t.Fatal(err)
	}
	if p.source != "/outbox" || p.exchange != "outbox" || p.kind != "topic" || p.routingKey != "{topic}" ||
		p.noDeclare || p.timeout != 30*time.Second || p.dialTimeout != 10*time.Second || p.maxBytes != 128<<20 {
		t.Errorf("publisher defaults: %+v", *p)
	}
	s, err := SubscriberConfig{URL: "amqp://guest:guest@localhost/", Group: "billing"}.settings()
	if err != nil {
		t.Fatal(err)
	}
	if s.queue != "billing" || s.deadQueue != "billing.dead" || s.bindingKey != "#" || s.maxDeliveries != 5 ||
		s.prefetch != 1 || s.reconnectDelay != 5*time.Second || s.exchange != "outbox" {
		t.Errorf("subscriber defaults: %+v", *s)
	}
}

func TestURLParameters(t *testing.T) {
	t.Parallel()
	p, err := PublisherConfig{URL: "amqps://guest:guest@localhost:5671/prod?exchange=events&exchange_type=direct&routing_key=ev.{topic}" +
		"&declare=false&timeout=5s&max_message_bytes=1000&connection_timeout=2500&source=/shop&heartbeat=5"}.settings()
	if err != nil {
		t.Fatal(err)
	}
	if p.exchange != "events" || p.kind != "direct" || p.routingKey != "ev.{topic}" || !p.noDeclare ||
		p.timeout != 5*time.Second || p.maxBytes != 1000 || p.dialTimeout != 2500*time.Millisecond || p.source != "/shop" {
		t.Errorf("publisher from URL: %+v", *p)
	}
	// A config field wins over the URL.
	p, err = PublisherConfig{URL: "amqp://localhost/?exchange=events", Exchange: "other"}.settings()
	if err != nil || p.exchange != "other" {
		t.Errorf("Exchange field over the URL: %v %v", p, err)
	}
	s, err := SubscriberConfig{URL: "amqp://localhost/?queue=q1&binding_key=order.*&dead_letter_queue={queue}.dlq&prefetch=10&max_deliveries=2&reconnect_delay=1s", Group: "g"}.settings()
	if err != nil {
		t.Fatal(err)
	}
	if s.queue != "q1" || s.bindingKey != "order.*" || s.deadQueue != "q1.dlq" || s.prefetch != 10 || s.maxDeliveries != 2 || s.reconnectDelay != time.Second {
		t.Errorf("subscriber from URL: %+v", *s)
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	// The binding's other prefix and native AMQP values are read too.
	d := &amqp.Delivery{
		Headers: amqp.Table{
			"cloudEvents:specversion": "1.0",
			"cloudEvents:id":          []byte("m-1"),
			"cloudEvents:type":        "order.paid",
			"cloudEvents:time":        created,
			"cloudEvents:attempt":     int32(3),
			"x-delivery-count":        int64(1),
		},
		ContentType: "application/json; charset=utf-8",
		Body:        []byte(`{"a":1}`),
	}
	m, err := decode(d)
	if err != nil {
		t.Fatal(err)
	}
	if m.MsgID != "m-1" || m.Topic != "order.paid" || !m.CreatedAt.Equal(created) || m.Headers["attempt"] != "3" || len(m.Headers) != 1 {
		t.Errorf("decoded %+v", m)
	}
	for _, bad := range []*amqp.Delivery{
		{Body: []byte(`{}`)}, // no attributes at all
		{Headers: amqp.Table{AttributePrefix + "id": "x", AttributePrefix + "type": "t"}, ContentType: "text/plain", Body: []byte(`{}`)},
		{Headers: amqp.Table{AttributePrefix + "id": "x", AttributePrefix + "type": "t"}, Body: []byte(`not json`)},
		{Headers: amqp.Table{AttributePrefix + "id": amqp.Table{}}, Body: []byte(`{}`)},
	} {
		if _, err := decode(bad); !errors.Is(err, cloudevents.ErrNotEvent) {
			t.Errorf("decode(%+v) = %v, want ErrNotEvent", bad.Headers, err)
		}
	}
}

package outboxmqtt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
)

// Publisher publishes outbox messages to an MQTT 5 broker with QoS 1 (or 2),
// one PUBLISH per message, and counts a message as delivered when the broker
// acknowledges it. It reconnects by itself and is safe for concurrent use.
type Publisher struct {
	cm       *autopaho.ConnectionManager
	template string
	source   string
	qos      byte
	window   int
	noSubOK  bool
	redacted string // the servers, for errors (a ClientConfig hook may change them)
	headers  *cloudevents.HeaderLog

	mu         sync.Mutex
	receiveMax int    // the broker's Receive Maximum on the current connection
	maxPacket  uint32 // the broker's Maximum Packet Size; 0 = no limit
}

var _ outbox.Publisher = (*Publisher)(nil)

// NewPublisher validates cfg, applies its defaults, connects to the broker
// and returns a Publisher. It waits for the first connection for at most
// DialTimeout (or until ctx ends): a broker that cannot be reached gives
// an error that satisfies outbox.IsUnavailable, one that refuses the
// connection a *ConnectError; a bad config says which field to fix.
func NewPublisher(ctx context.Context, cfg PublisherConfig) (*Publisher, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	qos := byte(1)
	if s.QoS == 2 {
		qos = 2
	}
	p := &Publisher{
		template:   s.TopicTemplate,
		source:     s.Source,
		qos:        qos,
		window:     s.Window,
		noSubOK:    s.NoSubscribers == NoSubscribersOK,
		headers:    cloudevents.NewHeaderLog(s.Logger, "outboxmqtt"),
		receiveMax: 65535,
	}
	p.cm, p.redacted, err = dialNamed(ctx, connOptions{
		url:            s.url,
		clientID:       s.ClientID,
		keepAlive:      s.KeepAlive,
		connectTimeout: s.DialTimeout,
		packetTimeout:  s.AckTimeout,
		tls:            s.TLS,
		cleanStart:     true,
		onUp:           p.connectionUp,
		session:        newPublisherSession(),
		configure:      s.ClientConfig,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// connectionUp records the limits the broker announced in its CONNACK.
func (p *Publisher) connectionUp(_ *autopaho.ConnectionManager, ca *paho.Connack) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.receiveMax, p.maxPacket = 65535, 0
	if ca.Properties != nil {
		if ca.Properties.ReceiveMaximum != nil {
			p.receiveMax = int(*ca.Properties.ReceiveMaximum)
		}
		if ca.Properties.MaximumPacketSize != nil {
			p.maxPacket = *ca.Properties.MaximumPacketSize
		}
	}
}

// Close disconnects from the broker. Publish calls still waiting fail as
// outbox.Unavailable.
func (p *Publisher) Close() error {
	disconnect(p.cm)
	return nil
}

// Publish publishes every message and returns one error per message, in
// order, or nil when the broker acknowledged them all.
//
// Messages with the same non-empty key are published one after another in
// slice order, each after the previous one's acknowledgement, and once one of
// them fails the later ones get outbox.ErrHeldBack (wrapped with
// outbox.Unavailable too when the failure was). Other messages are in
// flight together, at most Window (and the broker's Receive Maximum) at a
// time.
//
// Errors satisfying outbox.IsUnavailable (the relay pauses, no retry spent):
// no connection to the broker, the connection lost before the
// acknowledgement, no acknowledgement within AckTimeout, ctx ended, reason
// 0x97 quota exceeded. A message that breaks a rule of MQTT the broker
// would answer by closing the connection is not sent, and its error, a
// *cloudevents.LimitError, satisfies outbox.IsUndeliverable (the relay makes
// it DEAD at once): a topic name with a wildcard, empty or starting with
// "$", a topic or attribute value with a control character (tab, line
// break: Mosquitto's "Malformed UTF-8") or over 65,535 bytes, a packet over
// the broker's Maximum Packet Size. Any other error is a refusal that spends
// a retry: a *PublishError (the broker's reason code, including 0x10 "no
// matching subscribers" unless NoSubscribers is "ok").
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	p.mu.Lock()
	window := min(p.window, p.receiveMax)
	p.mu.Unlock()
	return outbox.PublishKeyGroups(ctx, msgs, window, p.send)
}

// send publishes one message and classifies the outcome.
func (p *Publisher) send(ctx context.Context, m *outbox.Message) error {
	topic := destination(p.template, m.Topic)
	pub := newPublish(m, topic, p.source, p.qos)
	p.mu.Lock()
	maxPacket := p.maxPacket
	p.mu.Unlock()
	if err := check(m, pub, maxPacket); err != nil {
		return err
	}
	p.headers.Check(m)
	resp, err := p.cm.Publish(ctx, pub)
	return p.outcome(ctx, m, topic, resp, err)
}

func (p *Publisher) outcome(ctx context.Context, m *outbox.Message, topic string, resp *paho.PublishResponse, err error) error {
	code := byte(0)
	reason := ""
	if resp != nil {
		code = resp.ReasonCode
		if resp.Properties != nil {
			reason = resp.Properties.ReasonString
		}
	}
	if reason == "" {
		reason = reasonText(code)
	}
	switch {
	case resp != nil && code == 0x97:
		return outbox.Unavailable(&PublishError{MsgID: m.MsgID, Topic: topic, ReasonCode: code, Reason: reason})
	case resp != nil && code >= 0x80:
		return &PublishError{MsgID: m.MsgID, Topic: topic, ReasonCode: code, Reason: reason}
	case err == nil && code == 0x10 && !p.noSubOK:
		return &PublishError{MsgID: m.MsgID, Topic: topic, ReasonCode: code, Reason: reason}
	case err == nil:
		return nil
	case errors.Is(err, paho.ErrInvalidArguments):
		return fmt.Errorf("outboxmqtt: message %q on topic %q cannot be published: %w", m.MsgID, topic, err)
	case ctx.Err() != nil:
		return outbox.Unavailable(fmt.Errorf("outboxmqtt: message %q: %w", m.MsgID, ctx.Err()))
	}
	return outbox.Unavailable(fmt.Errorf("outboxmqtt: message %q to %s: %w", m.MsgID, p.redacted, err))
}

// packetSize is the encoded size of a PUBLISH, as the broker measures it
// against its Maximum Packet Size.
func packetSize(pub *paho.Publish) int64 {
	pkt := pub.Packet()
	pkt.PacketID = 1
	n, _ := pkt.WriteTo(io.Discard)
	return n
}

package outboxamqp

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox/cloudevents"
	"github.com/outbox-go/outbox/internal/brokerconf"
	"github.com/outbox-go/outbox/internal/redelivery"
)

// Defaults applied to zero fields of PublisherConfig and SubscriberConfig.
const (
	DefaultSource          = "/outbox"
	DefaultExchange        = "outbox"
	DefaultExchangeType    = amqp.ExchangeTopic
	DefaultRoutingKey      = "{topic}"
	DefaultBindingKey      = "#"
	DefaultDeadLetterQueue = "{queue}.dead"
	DefaultTimeout         = 30 * time.Second
	DefaultDialTimeout     = 10 * time.Second
	DefaultMaxMessageBytes = 128 << 20 // RabbitMQ's default max_message_size
	DefaultMaxDeliveries   = 5
	DefaultPrefetch        = 1
	DefaultReconnectDelay  = 5 * time.Second

	DefaultRedeliveryDelay    = redelivery.DefaultDelay
	DefaultRedeliveryDelayMax = redelivery.DefaultDelayMax
	DefaultDeadLetterAfter    = redelivery.DefaultDeadLetterAfter
)

// ErrConfig marks every error of NewPublisher and NewSubscriber that comes
// from a bad URL or config field, as opposed to a broker that cannot be
// reached.
var ErrConfig = errors.New("outboxamqp: bad configuration")

var configError = brokerconf.Errorf("outboxamqp", ErrConfig)

// PublisherConfig configures a Publisher. A field left zero takes the value of
// the URL's query parameter of the same meaning (see the package
// documentation), and then its default; NewPublisher checks the result and
// says which field or parameter to fix.
type PublisherConfig struct {
	// URL is the broker URL, amqp://user:password@host:5672/vhost[?params]
	// (amqps:// for TLS). Its query parameters set the options below.
	// Required.
	URL string
	// Source is the CloudEvents source attribute (cloudEvents_source). URL
	// parameter "source". Defaults to "/outbox".
	Source string
	// Exchange is the exchange every message is published to. URL parameter
	// "exchange". Defaults to "outbox".
	Exchange string
	// ExchangeType is the type the exchange is declared with: "topic",
	// "direct", "fanout" or "headers". URL parameter "exchange_type".
	// Defaults to "topic".
	ExchangeType string
	// RoutingKey is the routing key of a message, as a template in which
	// "{topic}" stands for the row's topic, e.g. "events.{topic}". URL
	// parameter "routing_key". Defaults to "{topic}".
	RoutingKey string
	// NoDeclare makes the publisher check that the exchange exists instead of
	// declaring it (durable, of ExchangeType), for users whose account may not
	// declare exchanges. URL parameter "declare=false". Defaults to false.
	NoDeclare bool
	// Timeout bounds one Publish call when its context allows longer (or has
	// no deadline): a message without a confirm by then is reported as
	// outbox.Unavailable. URL parameter "timeout". Defaults to 30s.
	Timeout time.Duration
	// DialTimeout bounds each connection attempt, TCP, TLS and AMQP
	// handshakes together. URL parameter "connection_timeout" (in
	// milliseconds, as RabbitMQ's URI specification has it). Defaults to 10s.
	DialTimeout time.Duration
	// MaxMessageBytes is the largest body the publisher sends; a larger
	// message is refused without being sent. RabbitMQ closes the channel on a
	// message over its max_message_size, which would fail the whole batch, so
	// keep this at or below the broker's setting. URL parameter
	// "max_message_bytes". Defaults to 134217728 (128 MiB, RabbitMQ's default).
	MaxMessageBytes int
	// TLS is the TLS configuration of an amqps:// URL. Defaults to the URL's
	// certfile, keyfile, cacertfile and server_name_indication parameters, or
	// the system's roots when it has none.
	TLS *tls.Config
	// Logger receives what the publisher has to say outside a Publish result
	// (a lost connection, a reconnection). Defaults to slog.Default().
	Logger *slog.Logger
	// Dial, when set, opens the publisher's connections instead of the URL:
	// its first in NewPublisher and a new one after each loss, since an
	// amqp091-go connection does not reconnect. TLS, the login, SASL,
	// heartbeats and client properties are then the caller's (an
	// amqp.DialConfig of your own); the URL's host, user, password, vhost,
	// heartbeat, channel_max, auth_mechanism and TLS parameters, and TLS,
	// are not used, and the URL may be empty or hold only query parameters
	// ("?exchange=orders"). The other parameters and fields apply. ctx ends
	// after DialTimeout: a call that returns later counts as failed, and its
	// connection is closed. An error is reported as a failed connection
	// attempt is: outbox.Unavailable, or ErrRefusedLogin for amqp091-go's
	// refused logins. Each call must return a new connection: the publisher
	// owns it and closes it when it replaces it and in Close. Defaults to
	// nil.
	Dial func(ctx context.Context) (*amqp.Connection, error)
}

// SubscriberConfig configures a Subscriber. A field left zero takes the value
// of the URL's query parameter of the same meaning, and then its default.
type SubscriberConfig struct {
	// URL is the broker URL, as for PublisherConfig.URL. Required.
	URL string
	// Group is the consumer group: the subscribers of one group share one
	// queue, and each group gets every message. Required.
	Group string
	// MaxDeliveries is the least number of failed handler calls after which
	// a message goes to the dead-letter queue; it goes there once it has
	// also been failing for DeadLetterAfter. The subscriber holds a failing
	// message and calls the handler again itself, so the broker counts only
	// the deliveries it took back (a lost connection): the queue's
	// x-delivery-limit is MaxDeliveries-1, the limit for those. URL parameter
	// "max_deliveries". Defaults to 5.
	MaxDeliveries int
	// RedeliveryDelay is the pause before a message whose handler failed is
	// handed to the handler again; it doubles with each failure, up to
	// RedeliveryDelayMax. The subscriber holds the message meanwhile and
	// takes no other. URL parameter "redelivery_delay". Defaults to 1s.
	RedeliveryDelay time.Duration
	// RedeliveryDelayMax caps the doubling of RedeliveryDelay. URL parameter
	// "redelivery_delay_max". Defaults to 1m.
	RedeliveryDelayMax time.Duration
	// DeadLetterAfter is how long a message must have been failing (since
	// its first failed handler call in this subscriber) before it goes to
	// the dead-letter queue, at its MaxDeliveries-th failure or later; a
	// negative value asks for no such span. Keep it, and the longest outage
	// to ride out, under the broker's consumer_timeout (30m by default),
	// after which RabbitMQ closes the channel of a subscriber that holds a
	// message unacked. URL parameter "dead_letter_after". Defaults to 10m.
	DeadLetterAfter time.Duration
	// Exchange is the exchange the group's queue is bound to. URL parameter
	// "exchange". Defaults to "outbox".
	Exchange string
	// ExchangeType is the type the exchange is declared with, as for the
	// publisher. URL parameter "exchange_type". Defaults to "topic".
	ExchangeType string
	// NoDeclare makes the subscriber check that the exchange exists instead
	// of declaring it. The queues are always declared. URL parameter
	// "declare=false". Defaults to false.
	NoDeclare bool
	// Queue is the name of the group's queue, a durable quorum queue. URL
	// parameter "queue". Defaults to Group.
	Queue string
	// BindingKey is the binding key of the queue to the exchange: "#" takes
	// every routing key of a topic exchange, "order.*" the topics one level
	// under "order". URL parameter "binding_key". Defaults to "#".
	BindingKey string
	// DeadLetterQueue is the queue that receives the messages of Queue that
	// failed MaxDeliveries times, failed with outbox.Permanent, or are not
	// events; "{queue}" stands for Queue. URL parameter "dead_letter_queue".
	// Defaults to "{queue}.dead".
	DeadLetterQueue string
	// Prefetch is how many unacknowledged messages the broker sends the
	// subscriber at once (basic.qos): the one in hand and Prefetch-1 ahead.
	// Before RabbitMQ 4.0, a message the broker takes back because the
	// subscriber stopped or lost its connection counts as a failed delivery
	// against the delivery limit, so each stop spends a delivery of every
	// message prefetched ahead; with 1 only the message in hand is
	// outstanding, and a graceful stop acks it. Raise it for throughput when
	// handlers are fast and stops rare: with a handler that does nothing, a
	// 2-core machine took about 1,400 messages/s at 1, 4,700 at 16 and 9,300
	// at 64; a handler that commits a database transaction per message is
	// usually slower than the first figure. URL parameter "prefetch".
	// Defaults to 1.
	Prefetch int
	// DialTimeout bounds each connection attempt. URL parameter
	// "connection_timeout" (milliseconds). Defaults to 10s.
	DialTimeout time.Duration
	// ReconnectDelay is the longest pause between two connection attempts
	// after the connection was lost; the pause starts at 100ms and doubles up
	// to it. URL parameter "reconnect_delay". Defaults to 5s.
	ReconnectDelay time.Duration
	// TLS is the TLS configuration of an amqps:// URL, as for the publisher.
	TLS *tls.Config
	// Logger receives the subscriber's reports of lost connections and
	// reconnections. Defaults to slog.Default().
	Logger *slog.Logger
	// Dial, when set, opens the subscriber's connections instead of the
	// URL, as for PublisherConfig.Dial: the one NewSubscriber declares the
	// queues on, and the one of each Run, again after each loss, with a
	// pause of ReconnectDelay at most between failed calls. The subscriber
	// owns each connection and closes it when Run is done with it, so that
	// the broker requeues what was prefetched. Defaults to nil.
	Dial func(ctx context.Context) (*amqp.Connection, error)
}

// knownParams lists every query parameter; an unknown one is a typo and an
// error. The second group are amqp091-go's own (RabbitMQ's URI query
// parameters), read by the client itself.
var knownParams = map[string]bool{
	"source": true, "exchange": true, "exchange_type": true, "routing_key": true, "declare": true,
	"timeout": true, "max_message_bytes": true, "max_deliveries": true, "queue": true,
	"binding_key": true, "dead_letter_queue": true, "prefetch": true, "reconnect_delay": true,
	"redelivery_delay": true, "redelivery_delay_max": true, "dead_letter_after": true,

	"connection_timeout": true, "heartbeat": true, "channel_max": true, "auth_mechanism": true,
	"certfile": true, "keyfile": true, "cacertfile": true, "server_name_indication": true,
}

// tlsAliases are RabbitMQ's own names of the TLS parameters, accepted as
// well as tls_ca, tls_cert, tls_key and tls_server_name.
var tlsAliases = map[string]string{
	brokerconf.ParamTLSCA: "cacertfile", brokerconf.ParamTLSCert: "certfile",
	brokerconf.ParamTLSKey: "keyfile", brokerconf.ParamTLSServerName: "server_name_indication",
}

// broker is what the publisher and the subscriber share: where the broker is
// and how to reach it.
type broker struct {
	url         string // as given, passed to amqp091-go
	scheme      string
	redacted    string // the URL with its password masked, for messages
	params      url.Values
	q           *brokerconf.Query
	tlsFiles    brokerconf.TLSFiles
	tls         *tls.Config
	dialTimeout time.Duration
	logger      *slog.Logger
	// dialHook, when set, opens the connections instead of url.
	dialHook func(context.Context) (*amqp.Connection, error)
}

// hookBroker is what messages call the broker that Dial connects to.
const hookBroker = "Dial's broker"

// newBroker checks the URL, or, with a Dial hook, the query parameters the
// URL may be reduced to.
func newBroker(raw string, hook func(context.Context) (*amqp.Connection, error)) (*broker, error) {
	if hook == nil || (strings.TrimSpace(raw) != "" && !strings.HasPrefix(raw, "?")) {
		b, err := parseURL(raw)
		if err != nil {
			return nil, err
		}
		if hook != nil {
			b.dialHook, b.redacted, b.tlsFiles = hook, hookBroker, brokerconf.TLSFiles{}
		}
		return b, nil
	}
	params, err := url.ParseQuery(strings.TrimPrefix(raw, "?"))
	if err != nil {
		return nil, configError("URL %q is not a valid query (%s); with Dial, use e.g. \"?exchange=orders\"", raw, urlErrorReason(err))
	}
	b := &broker{redacted: hookBroker, params: params, dialHook: hook, q: brokerconf.NewQuery(params, configError)}
	if err := b.checkParams(); err != nil {
		return nil, err
	}
	return b, nil
}

// parseURL checks a broker URL. Errors never contain the password.
func parseURL(raw string) (*broker, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, configError(`URL is empty; set it to the broker, e.g. "amqp://guest:guest@localhost:5672/"`)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse quotes the whole URL in its error; say only what is wrong.
		return nil, configError("URL is not a valid URL (%s); use amqp://user:password@host:5672/vhost, with reserved characters in the password percent-encoded", urlErrorReason(err))
	}
	b := &broker{url: raw, scheme: u.Scheme, redacted: u.Redacted(), params: u.Query()}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return nil, configError("URL %q has scheme %q; use amqp:// or amqps://", b.redacted, u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, configError("URL %q has no host; use amqp://user:password@host:5672/vhost", b.redacted)
	}
	b.q = brokerconf.NewQuery(b.params, configError)
	if err := b.checkParams(); err != nil {
		return nil, err
	}
	if !b.tlsFiles.IsZero() && u.Scheme != "amqps" {
		return nil, configError("URL %q has TLS parameters (tls_ca, tls_cert, ...) but scheme amqp://; use amqps:// for TLS", b.redacted)
	}
	if _, err := amqp.ParseURI(raw); err != nil {
		return nil, configError("URL %q: %s", b.redacted, strings.ReplaceAll(err.Error(), raw, b.redacted))
	}
	return b, nil
}

// checkParams refuses an unknown query parameter and reads the TLS files.
func (b *broker) checkParams() error {
	known := make([]string, 0, len(knownParams))
	for name := range knownParams {
		known = append(known, name)
	}
	if err := b.q.Check(known, brokerconf.TLSParams); err != nil {
		return err
	}
	b.q.TLSFiles(&b.tlsFiles, tlsAliases)
	return nil
}

// urlErrorReason returns the reason of a url.Parse error without the URL it
// quotes, which may hold a password.
func urlErrorReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return "malformed"
}

// str fills *dst from the query parameter when *dst is empty, then from def.
func (b *broker) str(dst *string, param, def string) {
	b.q.String(dst, param)
	if *dst == "" {
		*dst = def
	}
}

// integer fills *dst from the query parameter when *dst is zero, then from def.
func (b *broker) integer(dst *int, param string, def int) error {
	if err := b.q.Int(dst, param); err != nil {
		return err
	}
	if *dst == 0 {
		*dst = def
	}
	if *dst < 0 {
		return configError("%s is %d; it must be positive (or 0 for the default of %d)", param, *dst, def)
	}
	return nil
}

// duration fills *dst from the query parameter (a Go duration such as "5s")
// when *dst is zero, then from def.
func (b *broker) duration(dst *time.Duration, param string, def time.Duration) error {
	if err := b.q.Duration(dst, param); err != nil {
		return err
	}
	if *dst == 0 {
		*dst = def
	}
	if *dst < 0 {
		return configError("%s is %s; it must be positive (or 0 for the default of %s)", param, *dst, def)
	}
	return nil
}

// noDeclare sets *dst when the URL says declare=false.
func (b *broker) noDeclare(dst *bool) error {
	if !b.q.Has("declare") {
		return nil
	}
	var declare bool
	if err := b.q.Bool(&declare, "declare"); err != nil {
		return err
	}
	if !declare {
		*dst = true
	}
	return nil
}

// common applies what the publisher and the subscriber share.
func (b *broker) common(dialTimeout *time.Duration, tlsCfg *tls.Config, logger *slog.Logger) error {
	if *dialTimeout == 0 && b.params.Has("connection_timeout") {
		ms, err := strconv.Atoi(b.params.Get("connection_timeout"))
		if err != nil || ms <= 0 {
			return configError("URL parameter connection_timeout=%q is not a positive number of milliseconds", b.params.Get("connection_timeout"))
		}
		*dialTimeout = time.Duration(ms) * time.Millisecond
	}
	if *dialTimeout == 0 {
		*dialTimeout = DefaultDialTimeout
	}
	if *dialTimeout < 0 {
		return configError("DialTimeout is %s; it must be positive (or 0 for the default of %s)", *dialTimeout, DefaultDialTimeout)
	}
	b.dialTimeout = *dialTimeout
	if logger == nil {
		logger = slog.Default()
	}
	b.logger = logger
	if b.dialHook != nil {
		return nil // TLS is the Dial hook's
	}
	if tlsCfg != nil && b.scheme != "amqps" {
		return configError("TLS is set but URL %q is amqp://; use amqps:// for TLS", b.redacted)
	}
	var err error
	b.tls, err = brokerconf.ResolveTLS(tlsCfg, b.tlsFiles, b.scheme == "amqps", configError)
	return err
}

func checkExchange(exchange, kind string) error {
	switch kind {
	case amqp.ExchangeTopic, amqp.ExchangeDirect, amqp.ExchangeFanout, amqp.ExchangeHeaders:
	default:
		return configError("exchange_type %q is not one of topic, direct, fanout, headers", kind)
	}
	if strings.HasPrefix(exchange, "amq.") && exchange != "amq.topic" && exchange != "amq.direct" && exchange != "amq.fanout" && exchange != "amq.headers" {
		return configError("exchange %q: names starting with \"amq.\" are reserved by RabbitMQ", exchange)
	}
	return checkName("exchange", exchange)
}

// checkName refuses names RabbitMQ would refuse (longer than 255 bytes) or
// that cannot be right (control characters).
func checkName(what, name string) error {
	if len(name) > 255 {
		return configError("%s name is %d bytes long; RabbitMQ allows at most 255", what, len(name))
	}
	for i := 0; i < len(name); i++ {
		if name[i] < ' ' || name[i] == 0x7f {
			return configError("%s name %q has a control character", what, name)
		}
	}
	return nil
}

// publisherSettings is a defaulted, validated PublisherConfig.
type publisherSettings struct {
	*broker
	source, exchange, kind, routingKey string
	noDeclare                          bool
	timeout                            time.Duration
	maxBytes                           int
	headers                            *cloudevents.HeaderLog
}

func (cfg PublisherConfig) settings() (*publisherSettings, error) {
	b, err := newBroker(cfg.URL, cfg.Dial)
	if err != nil {
		return nil, err
	}
	b.str(&cfg.Source, "source", DefaultSource)
	b.str(&cfg.Exchange, "exchange", DefaultExchange)
	b.str(&cfg.ExchangeType, "exchange_type", DefaultExchangeType)
	b.str(&cfg.RoutingKey, "routing_key", DefaultRoutingKey)
	if err := b.noDeclare(&cfg.NoDeclare); err != nil {
		return nil, err
	}
	if err := b.duration(&cfg.Timeout, "timeout", DefaultTimeout); err != nil {
		return nil, err
	}
	if err := b.integer(&cfg.MaxMessageBytes, "max_message_bytes", DefaultMaxMessageBytes); err != nil {
		return nil, err
	}
	if err := b.common(&cfg.DialTimeout, cfg.TLS, cfg.Logger); err != nil {
		return nil, err
	}
	if err := checkExchange(cfg.Exchange, cfg.ExchangeType); err != nil {
		return nil, err
	}
	if _, err := url.Parse(cfg.Source); err != nil {
		return nil, configError("Source %q is not a URI reference; use e.g. \"/outbox\" or \"https://example.com/orders\"", cfg.Source)
	}
	if len(strings.ReplaceAll(cfg.RoutingKey, "{topic}", "")) > 255-128 {
		return nil, configError("routing key template %q is too long: with a 128-byte topic it would pass RabbitMQ's limit of 255 bytes", cfg.RoutingKey)
	}
	return &publisherSettings{
		broker: b, source: cfg.Source, exchange: cfg.Exchange, kind: cfg.ExchangeType,
		routingKey: cfg.RoutingKey, noDeclare: cfg.NoDeclare, timeout: cfg.Timeout, maxBytes: cfg.MaxMessageBytes,
		headers: cloudevents.NewHeaderLog(b.logger, "outboxamqp"),
	}, nil
}

// subscriberSettings is a defaulted, validated SubscriberConfig.
type subscriberSettings struct {
	*broker
	group, exchange, kind, queue, bindingKey, deadQueue string
	noDeclare                                           bool
	maxDeliveries, prefetch                             int
	reconnectDelay                                      time.Duration
	redelivery                                          redelivery.Policy
}

func (cfg SubscriberConfig) settings() (*subscriberSettings, error) {
	b, err := newBroker(cfg.URL, cfg.Dial)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(cfg.Group) == "" {
		return nil, configError("Group is empty; name the consumer group, e.g. \"billing\" (it is the queue's name unless Queue is set)")
	}
	b.str(&cfg.Exchange, "exchange", DefaultExchange)
	b.str(&cfg.ExchangeType, "exchange_type", DefaultExchangeType)
	b.str(&cfg.Queue, "queue", cfg.Group)
	b.str(&cfg.BindingKey, "binding_key", DefaultBindingKey)
	b.str(&cfg.DeadLetterQueue, "dead_letter_queue", DefaultDeadLetterQueue)
	cfg.DeadLetterQueue = strings.ReplaceAll(cfg.DeadLetterQueue, "{queue}", cfg.Queue)
	if err := b.noDeclare(&cfg.NoDeclare); err != nil {
		return nil, err
	}
	if err := b.integer(&cfg.MaxDeliveries, "max_deliveries", DefaultMaxDeliveries); err != nil {
		return nil, err
	}
	if err := b.integer(&cfg.Prefetch, "prefetch", DefaultPrefetch); err != nil {
		return nil, err
	}
	if cfg.Prefetch > 65535 {
		return nil, configError("prefetch is %d; AMQP allows at most 65535", cfg.Prefetch)
	}
	if err := b.duration(&cfg.ReconnectDelay, "reconnect_delay", DefaultReconnectDelay); err != nil {
		return nil, err
	}
	if err := b.duration(&cfg.RedeliveryDelay, "redelivery_delay", DefaultRedeliveryDelay); err != nil {
		return nil, err
	}
	if err := b.duration(&cfg.RedeliveryDelayMax, "redelivery_delay_max", max(DefaultRedeliveryDelayMax, cfg.RedeliveryDelay)); err != nil {
		return nil, err
	}
	if cfg.DeadLetterAfter >= 0 { // negative: no least span
		if err := b.duration(&cfg.DeadLetterAfter, "dead_letter_after", DefaultDeadLetterAfter); err != nil {
			return nil, err
		}
	}
	policy := redelivery.Policy{MaxDeliveries: cfg.MaxDeliveries, Delay: cfg.RedeliveryDelay,
		DelayMax: cfg.RedeliveryDelayMax, DeadLetterAfter: cfg.DeadLetterAfter}
	if reason := policy.Check("RedeliveryDelay (redelivery_delay)", "RedeliveryDelayMax (redelivery_delay_max)"); reason != "" {
		return nil, configError("%s", reason)
	}
	if err := b.common(&cfg.DialTimeout, cfg.TLS, cfg.Logger); err != nil {
		return nil, err
	}
	if err := checkExchange(cfg.Exchange, cfg.ExchangeType); err != nil {
		return nil, err
	}
	for _, q := range []string{cfg.Queue, cfg.DeadLetterQueue} {
		if err := checkName("queue", q); err != nil {
			return nil, err
		}
		if strings.HasPrefix(q, "amq.") {
			return nil, configError("queue %q: names starting with \"amq.\" are reserved by RabbitMQ", q)
		}
	}
	if cfg.Queue == cfg.DeadLetterQueue {
		return nil, configError("DeadLetterQueue is the group's queue %q itself; use another name, e.g. %q", cfg.Queue, cfg.Queue+".dead")
	}
	if err := checkName("binding key", cfg.BindingKey); err != nil {
		return nil, err
	}
	return &subscriberSettings{
		broker: b, group: cfg.Group, exchange: cfg.Exchange, kind: cfg.ExchangeType, queue: cfg.Queue,
		bindingKey: cfg.BindingKey, deadQueue: cfg.DeadLetterQueue, noDeclare: cfg.NoDeclare,
		maxDeliveries: cfg.MaxDeliveries, prefetch: cfg.Prefetch, reconnectDelay: cfg.ReconnectDelay,
		redelivery: policy,
	}, nil
}

package outboxkafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outbox-go/outbox/internal/brokerconf"
)

// Defaults applied to zero fields of PublisherConfig and SubscriberConfig.
const (
	DefaultSource           = "/outbox"
	DefaultDestination      = "{topic}"
	DefaultDeadLetterTopic  = "{topic}.dlt"
	DefaultClientID         = "outbox"
	DefaultTimeout          = 30 * time.Second
	DefaultDialTimeout      = 10 * time.Second
	DefaultMaxMessageBytes  = 1000012 // Kafka's max.message.bytes default
	DefaultCompression      = "snappy"
	DefaultMaxDeliveries    = 5
	DefaultRetryBackoff     = 100 * time.Millisecond
	DefaultConcurrency      = 16
	DefaultSessionTimeout   = 45 * time.Second // Kafka's session.timeout.ms default
	DefaultRebalanceTimeout = time.Minute      // Kafka's rebalance.timeout.ms default
	DefaultPort             = "9092"
)

// ErrConfig marks every error of NewPublisher, NewSubscriber, DeadLetters
// and ParseURL that comes from a bad URL or config field, as opposed to a
// broker that cannot be reached (errors.Is).
var ErrConfig = errors.New("outboxkafka: bad configuration")

var configError = brokerconf.Errorf("outboxkafka", ErrConfig)

// PublisherConfig configures a Publisher. A field left zero takes the value of
// the URL's query parameter of the same meaning (see the package
// documentation), and then its default; New checks the result and says which
// field or parameter to fix.
type PublisherConfig struct {
	// URL is the broker URL, kafka://[user:password@]host:9092[,host2:9092][?params].
	// Its query parameters set the options below. Required.
	URL string
	// Source is the CloudEvents source attribute (ce_source). URL parameter
	// "source". Defaults to "/outbox".
	Source string
	// Destination is the Kafka topic a message goes to, as a template in which
	// "{topic}" stands for the row's topic, e.g. "outbox.{topic}"; a template
	// without "{topic}" sends every row to one topic. URL parameter "topic".
	// Defaults to "{topic}".
	Destination string
	// ClientID is the Kafka client id the broker sees in its logs and quotas.
	// URL parameter "client_id". Defaults to "outbox".
	ClientID string
	// Timeout bounds one Publish call when its context allows longer (or has
	// no deadline): a record without an ack by then is reported as
	// outbox.Unavailable. URL parameter "timeout". Defaults to 30s.
	Timeout time.Duration
	// DialTimeout bounds each connection attempt to a broker, and the check
	// that New makes that a broker answers. URL parameter "dial_timeout".
	// Defaults to 10s.
	DialTimeout time.Duration
	// MaxMessageBytes is the largest record batch the producer builds; a
	// single message that cannot fit is refused without being sent. Keep it at
	// or below the topic's max.message.bytes, or the broker refuses whole
	// batches instead. URL parameter "max_message_bytes". Defaults to 1000012.
	MaxMessageBytes int
	// Compression is the codec of produced batches: "none", "gzip",
	// "snappy", "lz4" or "zstd". Every consumer must be able to decode it. URL
	// parameter "compression". Defaults to "snappy".
	Compression string
	// AutoCreateTopics lets the broker create a missing destination topic
	// with its default settings when the broker allows that
	// (auto.create.topics.enable). When false, a message to a topic that does
	// not exist is refused. URL parameter "auto_create". Defaults to false.
	AutoCreateTopics bool
	// TLS, when set, makes every connection use TLS with this config. URL
	// parameters: "tls=true" for the system's roots, or tls_ca, tls_cert,
	// tls_key and tls_server_name (which turn TLS on). Defaults to nil (plain
	// TCP).
	TLS *tls.Config
	// SASL, when set, authenticates every connection with this mechanism
	// (e.g. an OAUTHBEARER one whose token refreshes), instead of the URL's
	// credentials and sasl parameter. Defaults to nil.
	SASL sasl.Mechanism
	// Logger receives what the publisher has to say outside a Publish result.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Client, when set, is the client the publisher produces with, instead of
	// one of its own: the URL is then optional, and ClientID, DialTimeout,
	// Compression, TLS and SASL are the client's business. Build it with
	// kgo.RequiredAcks(kgo.AllISRAcks()) and the idempotent producer
	// (kgo's default), or an ack does not mean what the relay takes it to
	// mean; MaxMessageBytes must not exceed its ProducerBatchMaxBytes. Close
	// leaves it open. Defaults to nil.
	Client *kgo.Client
}

// connection is what the publisher and the subscriber share: where the
// brokers are and how to talk to them.
type connection struct {
	seeds       []string
	redacted    string // the URL with its password masked, for messages
	mechanism   string // "", "plain", "scram-sha-256", "scram-sha-512", "oauthbearer"
	user, pass  string
	sasl        sasl.Mechanism // set by a config field: wins over the URL's
	tlsOn       bool           // tls=true
	tlsFiles    brokerconf.TLSFiles
	tls         *tls.Config
	clientID    string
	dialTimeout time.Duration
	compression string
	maxBytes    int
	autoCreate  bool
	timeout     time.Duration
	logger      *slog.Logger
	// dial, when set, replaces the dialer (tests cut connections with it).
	dial func(ctx context.Context, network, host string) (net.Conn, error)
	// q holds the query parameters, for the publisher's and subscriber's
	// own options.
	q *brokerconf.Query
}

// knownParams lists every query parameter besides the TLS ones; an unknown
// one is a typo and an error.
var knownParams = []string{
	"topic", "source", "client_id", "timeout", "dial_timeout",
	"max_message_bytes", "compression", "auto_create", "tls",
	"sasl", "dlt", "max_deliveries", "retry_backoff", "concurrency",
	"session_timeout", "rebalance_timeout",
	"redelivery_delay", "redelivery_delay_max", "dead_letter_after",
}

// saslMechanisms are the values of the sasl parameter.
var saslMechanisms = []string{"plain", "scram-sha-256", "scram-sha-512", "oauthbearer"}

// parseURL parses a broker URL. Errors never contain the password.
func parseURL(raw string) (*connection, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, configError(`URL is empty; set it to the brokers, e.g. "kafka://localhost:9092"`)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse quotes the whole URL in its error; say only what part is wrong.
		return nil, configError("URL is not a valid URL (%s); use kafka://host:9092[,host2:9092][?param=value]", urlErrorReason(err))
	}
	c := &connection{redacted: u.Redacted(), q: brokerconf.NewQuery(u.Query(), configError)}
	if u.Scheme != "kafka" {
		return nil, configError("URL %q has scheme %q; use kafka://host:9092", c.redacted, u.Scheme)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, configError("URL %q has path %q; a Kafka URL has none (choose the topic with ?topic=)", c.redacted, u.Path)
	}
	if u.Host == "" {
		return nil, configError("URL %q has no broker address; use kafka://host:9092[,host2:9092]", c.redacted)
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return nil, configError("URL %q has an empty broker address in its host list", c.redacted)
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), DefaultPort)
		}
		c.seeds = append(c.seeds, h)
	}
	if err := c.q.Check(knownParams, brokerconf.TLSParams); err != nil {
		return nil, err
	}
	if u.User != nil {
		c.user = u.User.Username()
		c.pass, _ = u.User.Password()
		c.mechanism = "plain"
	}
	if m := strings.ToLower(c.q.Get("sasl")); m != "" {
		if !slices.Contains(saslMechanisms, m) {
			return nil, configError("URL parameter sasl=%q; use plain, scram-sha-256, scram-sha-512 or oauthbearer", m)
		}
		if m == "oauthbearer" && c.pass == "" {
			return nil, configError("URL parameter sasl=oauthbearer needs the token as the URL's password: kafka://:TOKEN@host:9092 (or set PublisherConfig.SASL)")
		}
		if u.User == nil {
			return nil, configError("URL parameter sasl=%s needs a user and password in the URL: kafka://user:password@host:9092", m)
		}
		c.mechanism = m
	}
	if err := c.q.Bool(&c.tlsOn, "tls"); err != nil {
		return nil, err
	}
	c.q.TLSFiles(&c.tlsFiles, nil)
	// The subscriber's and the bench baseline's clients take auto_create
	// from the URL; the publisher's from PublisherConfig.AutoCreateTopics.
	return c, c.q.Bool(&c.autoCreate, "auto_create")
}

func urlErrorReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return "unparsable"
}

// common fills the shared settings from fields, then URL parameters, then
// defaults, and checks them.
func (c *connection) common(clientID string, dial, timeout time.Duration, maxBytes int, compression string, tlsCfg *tls.Config, logger *slog.Logger) error {
	c.q.String(&clientID, "client_id")
	c.q.String(&compression, "compression")
	if err := c.q.Duration(&dial, "dial_timeout"); err != nil {
		return err
	}
	if err := c.q.Duration(&timeout, "timeout"); err != nil {
		return err
	}
	if err := c.q.Int(&maxBytes, "max_message_bytes"); err != nil {
		return err
	}
	c.clientID = def(clientID, DefaultClientID)
	c.dialTimeout = def(dial, DefaultDialTimeout)
	c.timeout = def(timeout, DefaultTimeout)
	c.maxBytes = def(maxBytes, DefaultMaxMessageBytes)
	c.compression = strings.ToLower(def(compression, DefaultCompression))
	if c.q.Has("tls") && !c.tlsOn && !c.tlsFiles.IsZero() {
		return configError("URL %q has tls=false and TLS parameters (tls_ca, tls_cert, ...); drop one or the other", c.redacted)
	}
	var err error
	if c.tls, err = brokerconf.ResolveTLS(tlsCfg, c.tlsFiles, c.tlsOn, configError); err != nil {
		return err
	}
	c.logger = logger
	if c.logger == nil {
		c.logger = slog.Default()
	}
	switch {
	case dial < 0:
		return configError("DialTimeout is %s; it must be positive (or 0 for %s)", dial, DefaultDialTimeout)
	case timeout < 0:
		return configError("Timeout is %s; it must be positive (or 0 for %s)", timeout, DefaultTimeout)
	case c.maxBytes < 512 || c.maxBytes > 1<<30:
		return configError("MaxMessageBytes is %d; use 512 to %d (the topic's max.message.bytes)", c.maxBytes, 1<<30)
	}
	if _, ok := codecs[c.compression]; !ok {
		return configError("Compression is %q; use none, gzip, snappy, lz4 or zstd", c.compression)
	}
	return nil
}

var codecs = map[string]kgo.CompressionCodec{
	"none":   kgo.NoCompression(),
	"gzip":   kgo.GzipCompression(),
	"snappy": kgo.SnappyCompression(),
	"lz4":    kgo.Lz4Compression(),
	"zstd":   kgo.ZstdCompression(),
}

func def[T comparable](v, d T) T {
	var zero T
	if v == zero {
		return d
	}
	return v
}

// clientOpts returns the kgo options every client of this package uses.
func (c *connection) clientOpts(hook kgo.Hook) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.seeds...),
		kgo.ClientID(c.clientID),
		kgo.DialTimeout(c.dialTimeout),
		// acks=all and the idempotent producer are kgo's defaults; they are
		// spelled out because the ack's meaning depends on them.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// kgo lingers 10ms by default waiting for more records. Publish
		// hands over a whole batch at once, so lingering only adds latency;
		// records still share requests while earlier ones are in flight.
		kgo.ProducerLinger(0),
		kgo.ProducerBatchMaxBytes(int32(c.maxBytes)), //nolint:gosec // common checked 512 <= maxBytes <= 1<<30
		kgo.ProducerBatchCompression(codecs[c.compression]),
	}
	if c.autoCreate {
		opts = append(opts, kgo.AllowAutoTopicCreation())
	}
	switch {
	case c.dial != nil:
		opts = append(opts, kgo.Dialer(c.dial))
	case c.tls != nil:
		d := &net.Dialer{Timeout: c.dialTimeout}
		opts = append(opts, kgo.Dialer((&tls.Dialer{NetDialer: d, Config: c.tls}).DialContext))
	}
	if m := c.saslMechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	if hook != nil {
		opts = append(opts, kgo.WithHooks(hook))
	}
	return opts
}

func (c *connection) saslMechanism() sasl.Mechanism {
	if c.sasl != nil {
		return c.sasl
	}
	switch c.mechanism {
	case "oauthbearer":
		return oauth.Auth{Zid: c.user, Token: c.pass}.AsMechanism()
	case "plain":
		return plain.Auth{User: c.user, Pass: c.pass}.AsMechanism()
	case "scram-sha-256":
		return scram.Auth{User: c.user, Pass: c.pass}.AsSha256Mechanism()
	case "scram-sha-512":
		return scram.Auth{User: c.user, Pass: c.pass}.AsSha512Mechanism()
	}
	return nil
}

// template is a destination (or dead-letter) topic template.
type template string

func (t template) render(topic string) string {
	return strings.ReplaceAll(string(t), "{topic}", topic)
}

// validTopic reports why name is not a legal Kafka topic name, or "".
func validTopic(name string) string {
	switch {
	case name == "":
		return "it is empty"
	case len(name) > 249:
		return "it is longer than 249 characters"
	case name == "." || name == "..":
		return `"." and ".." are not topic names`
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isTopicChar(c) {
			return fmt.Sprintf("it contains %q; topic names are ASCII letters, digits, '.', '_' and '-'", c)
		}
	}
	return ""
}

func isTopicChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// checkTemplate validates a template by rendering it with a sample topic.
func checkTemplate(field, param, t string) error {
	if t == "" {
		return nil
	}
	if reason := validTopic(template(t).render("sample")); reason != "" {
		return configError("%s (URL parameter %s) %q does not make a valid topic name: %s", field, param, t, reason)
	}
	return nil
}

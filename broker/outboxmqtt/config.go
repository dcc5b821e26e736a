package outboxmqtt

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
	"github.com/outbox-go/outbox/internal/brokerconf"
	"github.com/outbox-go/outbox/internal/redelivery"
)

// Defaults applied to zero fields of PublisherConfig and SubscriberConfig.
const (
	DefaultTopicTemplate      = "outbox/{topic}"
	DefaultDeadLetterTemplate = "outbox/dead/{group}"
	DefaultWindow             = 20
	DefaultDialTimeout        = 10 * time.Second
	DefaultAckTimeout         = 30 * time.Second
	DefaultKeepAlive          = 30 * time.Second
	DefaultSessionExpiry      = 4294967295 * time.Second // MQTT 5's "never expires"
	DefaultMaxDeliveries      = 5
	DefaultRedeliveryDelay    = redelivery.DefaultDelay
	DefaultRedeliveryDelayMax = redelivery.DefaultDelayMax
	DefaultDeadLetterAfter    = redelivery.DefaultDeadLetterAfter
)

// ErrConfig is what every configuration error of NewPublisher,
// NewSubscriber and ParseURL satisfies (errors.Is): a bad URL,
// query parameter or config field, as opposed to a broker that cannot be
// reached.
var ErrConfig = errors.New("outboxmqtt: bad configuration")

var configErrorf = brokerconf.Errorf("outboxmqtt", ErrConfig)

// NoSubscribers says what the publisher does with a PUBACK whose reason code
// is 0x10 "no matching subscribers": the broker accepted the message and
// dropped it, because no subscription (not even an offline persistent one)
// matched its topic.
type NoSubscribers string

const (
	// NoSubscribersFail makes such a message fail as a refusal (a plain error
	// that spends one of its retries), like an unroutable message with
	// RabbitMQ's mandatory flag: the row stays NEW, and reaches DEAD at the
	// retry limit, where `outbox dead retry` can send it again once a
	// consumer group exists.
	NoSubscribersFail NoSubscribers = "fail"
	// NoSubscribersOK counts such a message as delivered: the row is marked
	// SENT although nobody received it.
	NoSubscribersOK NoSubscribers = "ok"
)

// PublisherConfig configures a Publisher. Zero fields take the value of the
// URL's query parameter of the same meaning, else their default; NewPublisher
// checks the result and says which field or parameter to fix.
type PublisherConfig struct {
	// URL is the broker URL (the value of `outbox relay --broker`):
	// mqtt://[user:password@]host[:port][?param=value&...], or mqtts:// for
	// TLS. The port defaults to 1883 (mqtts: 8883). The query parameters are
	// listed in the package documentation; an unknown one is an error.
	// Required.
	URL string
	// Source is the CloudEvents source attribute. Defaults to the URL's
	// source parameter, else "/outbox".
	Source string
	// TopicTemplate is the MQTT topic a message is published to, with
	// "{topic}" standing for the row's topic, which is inserted unchanged
	// (dots stay dots; a "/" in a row topic makes another topic level).
	// Defaults to the URL's topic parameter, else "outbox/{topic}".
	TopicTemplate string
	// ClientID is the MQTT client identifier of the publisher's connection.
	// Two connections with the same id take the session from each other, so
	// each publisher needs its own. Defaults to the URL's client_id
	// parameter, else "outbox-relay-" and 8 random hex digits.
	ClientID string
	// QoS is the quality of service of each PUBLISH: 1 (the PUBACK is the
	// ack) or 2 (the PUBCOMP is; it needs NoSubscribers "ok", because the
	// broker's "no matching subscribers" answer is then not seen). QoS 0 has
	// no acknowledgement and is refused. Defaults to the URL's qos
	// parameter, else 1.
	QoS int
	// Window is the most messages one Publish call has in flight at once
	// (published and not yet acknowledged). It is lowered to the broker's
	// Receive Maximum (mosquitto's max_inflight_messages, 20 by default)
	// when that is smaller. Defaults to the URL's window parameter, else 20.
	Window int
	// NoSubscribers says whether a PUBACK with reason 0x10 "no matching
	// subscribers" is a refusal ("fail") or a success ("ok"). Defaults to
	// the URL's no_subscribers parameter, else "fail".
	NoSubscribers NoSubscribers
	// DialTimeout bounds NewPublisher's wait for the first connection.
	// Defaults to the URL's dial_timeout (or connect_timeout) parameter,
	// else 10s.
	DialTimeout time.Duration
	// AckTimeout bounds the wait for one message's acknowledgement when the
	// caller's context has no earlier deadline; a message not acknowledged in
	// time fails as outbox.Unavailable. Defaults to the URL's ack_timeout
	// parameter, else 30s.
	AckTimeout time.Duration
	// KeepAlive is the MQTT keep-alive interval: a connection that is silent
	// for 1.5 times this long is dropped by the broker, and the client pings
	// within it. Defaults to the URL's keepalive parameter, else 30s.
	KeepAlive time.Duration
	// TLS is used for mqtts:// URLs. Defaults to the URL's tls_ca,
	// tls_cert, tls_key and tls_server_name parameters, else the system's
	// root certificates and the URL's host name.
	TLS *tls.Config
	// Logger receives what the publisher has to say outside a Publish
	// result (a row header renamed on the wire). Defaults to slog.Default().
	Logger *slog.Logger
	// ClientConfig, when set, adjusts the autopaho configuration the
	// publisher builds from the other fields, before it connects: servers,
	// TLS, the login, the dialling, the CONNECT packet, logging. The adapter
	// takes no connection manager of the caller's, because its acks and
	// session rest on paho state that must be set when the manager is made;
	// so it keeps the client id, the session state, clean start, session
	// expiry (also in a CONNECT packet the hook builds), the packet timeout
	// and its own callbacks, and runs the hook's OnConnectionUp and
	// OnConnectError after its own. The connection still reconnects
	// whatever OnConnectionDown returns. The URL is still required. Defaults
	// to nil.
	ClientConfig func(*autopaho.ClientConfig)
}

// SubscriberConfig configures a Subscriber. Zero fields take the value of the
// URL's query parameter of the same meaning, else their default;
// NewSubscriber checks the result and says which field or parameter to fix.
type SubscriberConfig struct {
	// URL is the broker URL, as for PublisherConfig.URL. The publisher-only
	// parameters (source, client_id, qos, window, no_subscribers,
	// ack_timeout) are accepted and ignored, so both sides can share one
	// URL. Required.
	URL string
	// Group is the consumer group: the share name of the MQTT shared
	// subscription "$share/<Group>/<filter>". Each group receives every
	// message; the members of a group share them. 1 to 64 characters, none
	// of "/", "+", "#". Required.
	Group string
	// Name tells the members of a group apart. The MQTT client id is
	// "outbox-<Group>-<Name>", and its persistent session holds the member's
	// share of the messages while it is away, so Name must be stable across
	// restarts of the same member and differ between members (a pod name in
	// a StatefulSet, say). Defaults to the URL's name parameter, else the
	// host name.
	Name string
	// Topic is the row topic to consume, inserted into TopicTemplate to make
	// the subscription's topic filter. It may be an MQTT wildcard: "+" takes
	// every row topic without a "/", "#" takes all. Defaults to the URL's
	// consume parameter. Required (in one of the two).
	Topic string
	// TopicTemplate is the publisher's TopicTemplate. Defaults to the URL's
	// topic parameter, else "outbox/{topic}".
	TopicTemplate string
	// MaxDeliveries is the least number of failed handler calls after which
	// a message goes to the dead-letter topic; it goes there once it has
	// also been failing for DeadLetterAfter. Defaults to the URL's
	// max_deliveries parameter, else 5.
	MaxDeliveries int
	// RedeliveryDelay is the wait before the second delivery of a message
	// whose handler failed; it doubles for each further delivery, up to
	// RedeliveryDelayMax. Defaults to the URL's redelivery_delay parameter,
	// else 1s.
	RedeliveryDelay time.Duration
	// RedeliveryDelayMax caps the doubling of RedeliveryDelay. Defaults to
	// the URL's redelivery_delay_max parameter, else 1m.
	RedeliveryDelayMax time.Duration
	// DeadLetterAfter is how long a message must have been failing (since
	// its first failed handler call) before it goes to the dead-letter
	// topic, at its MaxDeliveries-th failure or later; a negative value asks
	// for no such span. Defaults to the URL's dead_letter_after parameter,
	// else 10m.
	DeadLetterAfter time.Duration
	// DeadLetterTopic is the MQTT topic that messages go to after
	// MaxDeliveries failed deliveries, with "{group}" standing for Group.
	// Something must subscribe to it (with a persistent session), or the
	// broker drops what arrives there and Run stops with an error.
	// Defaults to the URL's dead_topic parameter, else "outbox/dead/{group}".
	DeadLetterTopic string
	// SessionExpiry is how long the broker keeps the member's session (its
	// subscription and the messages queued for it) while the member is
	// disconnected: a member away for longer loses the messages the broker
	// acknowledged for it, which the relay marked SENT. At most 4294967295s,
	// which MQTT 5 reads as never. Defaults to the URL's session_expiry
	// parameter, else never (4294967295s); Leave removes a member for good.
	SessionExpiry time.Duration
	// DialTimeout bounds each wait for a connection in NewSubscriber and
	// Leave. Defaults to the URL's dial_timeout (or connect_timeout) parameter,
	// else 10s.
	DialTimeout time.Duration
	// KeepAlive is the MQTT keep-alive interval. Defaults to the URL's
	// keepalive parameter, else 30s.
	KeepAlive time.Duration
	// TLS is used for mqtts:// URLs. Defaults to the URL's tls_ca,
	// tls_cert, tls_key and tls_server_name parameters, else the system's
	// root certificates and the URL's host name.
	TLS *tls.Config
	// ClientConfig, when set, adjusts the autopaho configuration of each
	// connection the subscriber makes (NewSubscriber's, each Run's,
	// Leave's), as for PublisherConfig.ClientConfig: the member's client id,
	// its persistent session, the acks sent after the handler succeeded, and
	// the subscription made again on every connection stay the adapter's.
	// Defaults to nil.
	ClientConfig func(*autopaho.ClientConfig)
}

// publisherSettings is a defaulted, validated PublisherConfig.
type publisherSettings struct {
	PublisherConfig
	url *brokerURL
}

func (cfg PublisherConfig) settings() (*publisherSettings, error) {
	b, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if err := cfg.fromURL(b); err != nil {
		return nil, err
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.TLS, err = b.tlsConfig(cfg.TLS); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &publisherSettings{PublisherConfig: cfg, url: b}, nil
}

// fromURL fills the fields the URL's query parameters set.
func (cfg *PublisherConfig) fromURL(b *brokerURL) error {
	b.q.String(&cfg.Source, "source")
	b.q.String(&cfg.TopicTemplate, "topic")
	b.q.String(&cfg.ClientID, "client_id")
	if cfg.NoSubscribers == "" {
		cfg.NoSubscribers = NoSubscribers(b.params.Get("no_subscribers"))
	}
	if cfg.QoS == 0 && b.params.Get("qos") == "0" {
		return errQoS0
	}
	for _, e := range []error{
		b.q.Int(&cfg.QoS, "qos"), b.q.Int(&cfg.Window, "window"),
		b.q.SignedDuration(&cfg.DialTimeout, "dial_timeout"), b.q.SignedDuration(&cfg.DialTimeout, "connect_timeout"), b.q.SignedDuration(&cfg.AckTimeout, "ack_timeout"),
		b.q.SignedDuration(&cfg.KeepAlive, "keepalive"),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

// setDefaults fills the zero fields with their defaults. QoS 2 needs
// NoSubscribers set to NoSubscribersOK.
func (cfg *PublisherConfig) setDefaults() error {
	if cfg.Source == "" {
		cfg.Source = cloudevents.DefaultSource
	}
	if cfg.TopicTemplate == "" {
		cfg.TopicTemplate = DefaultTopicTemplate
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "outbox-relay-" + randomHex(4)
	}
	if cfg.QoS == 0 {
		cfg.QoS = 1
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.QoS == 2 && cfg.NoSubscribers != NoSubscribersOK {
		return configErrorf("qos=2 needs no_subscribers=ok: with QoS 2 the broker's 0x10 \"no matching subscribers\" comes in the PUBREC, which paho.golang does not report, so a message nobody receives would count as delivered without notice; use qos=1, or accept that with no_subscribers=ok")
	}
	if cfg.NoSubscribers == "" {
		cfg.NoSubscribers = NoSubscribersFail
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.AckTimeout == 0 {
		cfg.AckTimeout = DefaultAckTimeout
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	return nil
}

// check reports the first field out of range.
func (cfg *PublisherConfig) check() error {
	if err := checkTemplate("TopicTemplate (URL parameter topic)", cfg.TopicTemplate, "{topic}"); err != nil {
		return err
	}
	if _, err := url.Parse(cfg.Source); err != nil {
		return configErrorf(`PublisherConfig.Source %q is not a URI reference; use e.g. "/outbox"`, cfg.Source)
	}
	if cfg.QoS != 1 && cfg.QoS != 2 {
		if cfg.QoS <= 0 {
			return errQoS0
		}
		return configErrorf("QoS %d does not exist; use 1 (PUBACK) or 2 (PUBCOMP)", cfg.QoS)
	}
	if cfg.Window < 0 {
		return configErrorf("PublisherConfig.Window is %d; it must be positive (or 0 for the default of %d)", cfg.Window, DefaultWindow)
	}
	if cfg.NoSubscribers != NoSubscribersFail && cfg.NoSubscribers != NoSubscribersOK {
		return configErrorf(`no_subscribers is %q; use "fail" (a PUBACK 0x10 is a refusal) or "ok" (it is a success)`, cfg.NoSubscribers)
	}
	if err := checkClientID(cfg.ClientID); err != nil {
		return err
	}
	return checkTimers(cfg.KeepAlive, []namedDuration{{"DialTimeout (dial_timeout)", cfg.DialTimeout}, {"AckTimeout (ack_timeout)", cfg.AckTimeout}, {"KeepAlive (keepalive)", cfg.KeepAlive}})
}

var errQoS0 = configErrorf("QoS 0 is not supported: it has no acknowledgement, so the relay could not know that the broker got the message; use qos=1 (or 2)")

// subscriberSettings is a defaulted, validated SubscriberConfig.
type subscriberSettings struct {
	SubscriberConfig
	url       *brokerURL
	clientID  string
	filter    string // the topic filter, without $share/<group>/
	deadTopic string
	// redelivery is the policy of RedeliveryDelay, RedeliveryDelayMax,
	// DeadLetterAfter and MaxDeliveries.
	redelivery redelivery.Policy
}

func (cfg SubscriberConfig) settings() (*subscriberSettings, error) {
	b, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if err := cfg.fromURL(b); err != nil {
		return nil, err
	}
	policy, err := cfg.setDefaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.check(policy); err != nil {
		return nil, err
	}
	if cfg.TLS, err = b.tlsConfig(cfg.TLS); err != nil {
		return nil, err
	}
	s := &subscriberSettings{
		SubscriberConfig: cfg,
		url:              b,
		clientID:         "outbox-" + cfg.Group + "-" + cfg.Name,
		filter:           strings.ReplaceAll(cfg.TopicTemplate, "{topic}", cfg.Topic),
		deadTopic:        strings.ReplaceAll(cfg.DeadLetterTopic, "{group}", cfg.Group),
		redelivery:       policy,
	}
	if reason := topicNameProblem(s.deadTopic); reason != "" {
		return nil, configErrorf("dead-letter topic %q %s; fix DeadLetterTopic (or ?dead_topic=)", s.deadTopic, reason)
	}
	if len(s.filter) > 65535 || !utf8.ValidString(s.filter) {
		return nil, configErrorf("topic filter %q is not a valid MQTT topic filter", s.filter)
	}
	return s, nil
}

// fromURL fills the fields the URL's query parameters set.
func (cfg *SubscriberConfig) fromURL(b *brokerURL) error {
	b.q.String(&cfg.Name, "name")
	b.q.String(&cfg.Topic, "consume")
	b.q.String(&cfg.TopicTemplate, "topic")
	b.q.String(&cfg.DeadLetterTopic, "dead_topic")
	for _, e := range []error{
		b.q.Int(&cfg.MaxDeliveries, "max_deliveries"),
		b.q.SignedDuration(&cfg.RedeliveryDelay, "redelivery_delay"), b.q.SignedDuration(&cfg.RedeliveryDelayMax, "redelivery_delay_max"),
		b.q.SignedDuration(&cfg.DeadLetterAfter, "dead_letter_after"), b.q.SignedDuration(&cfg.SessionExpiry, "session_expiry"),
		b.q.SignedDuration(&cfg.DialTimeout, "dial_timeout"), b.q.SignedDuration(&cfg.DialTimeout, "connect_timeout"), b.q.SignedDuration(&cfg.KeepAlive, "keepalive"),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

// setDefaults fills the zero fields with their defaults and returns the
// redelivery policy. An empty Name defaults to the host name, and is an
// error when that is unknown.
func (cfg *SubscriberConfig) setDefaults() (redelivery.Policy, error) {
	if cfg.Name == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			return redelivery.Policy{}, configErrorf("SubscriberConfig.Name is empty and the host name is unknown (%v); set Name (or ?name=) to a name that is stable for this member", err)
		}
		cfg.Name = host
	}
	if cfg.TopicTemplate == "" {
		cfg.TopicTemplate = DefaultTopicTemplate
	}
	if cfg.DeadLetterTopic == "" {
		cfg.DeadLetterTopic = DefaultDeadLetterTemplate
	}
	if cfg.MaxDeliveries == 0 {
		cfg.MaxDeliveries = DefaultMaxDeliveries
	}
	policy := redelivery.Policy{MaxDeliveries: cfg.MaxDeliveries, Delay: cfg.RedeliveryDelay,
		DelayMax: cfg.RedeliveryDelayMax, DeadLetterAfter: cfg.DeadLetterAfter}.Defaults()
	cfg.RedeliveryDelay, cfg.RedeliveryDelayMax, cfg.DeadLetterAfter = policy.Delay, policy.DelayMax, policy.DeadLetterAfter
	if cfg.SessionExpiry == 0 {
		cfg.SessionExpiry = DefaultSessionExpiry
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	return policy, nil
}

// check reports the first field out of range, the redelivery policy's
// included.
func (cfg *SubscriberConfig) check(policy redelivery.Policy) error {
	switch {
	case cfg.Group == "":
		return configErrorf(`SubscriberConfig.Group is empty; name the consumer group, e.g. "billing"`)
	case utf8.RuneCountInString(cfg.Group) > outbox.MaxGroupLen || strings.ContainsAny(cfg.Group, "/+#\x00") || !utf8.ValidString(cfg.Group):
		return configErrorf(`SubscriberConfig.Group %q is not a valid share name; use 1 to %d characters without "/", "+", "#"`, cfg.Group, outbox.MaxGroupLen)
	case strings.ContainsAny(cfg.Name, "\x00") || !utf8.ValidString(cfg.Name):
		return configErrorf("SubscriberConfig.Name %q must be valid UTF-8 without NUL", cfg.Name)
	case cfg.Topic == "":
		return configErrorf(`SubscriberConfig.Topic is empty; set the row topic to consume (or ?consume=), e.g. "order.paid", or "#" for all`)
	case cfg.MaxDeliveries < 0:
		return configErrorf("MaxDeliveries is %d; it must be positive (or 0 for the default of %d)", cfg.MaxDeliveries, DefaultMaxDeliveries)
	case cfg.SessionExpiry < time.Second || cfg.SessionExpiry > 4294967295*time.Second:
		return configErrorf("SessionExpiry is %s; use at least 1s (at most 4294967295s): the session is what keeps the group's messages while the member is away", cfg.SessionExpiry)
	}
	if reason := policy.Check("RedeliveryDelay (redelivery_delay)", "RedeliveryDelayMax (redelivery_delay_max)"); reason != "" {
		return configErrorf("%s", reason)
	}
	if err := checkTemplate("SubscriberConfig.TopicTemplate (URL parameter topic)", cfg.TopicTemplate, "{topic}"); err != nil {
		return err
	}
	if !strings.Contains(cfg.DeadLetterTopic, "{group}") && strings.ContainsAny(cfg.DeadLetterTopic, "{}") {
		return configErrorf("DeadLetterTopic %q: the only placeholder is {group}", cfg.DeadLetterTopic)
	}
	return checkTimers(cfg.KeepAlive, []namedDuration{{"RedeliveryDelay (redelivery_delay)", cfg.RedeliveryDelay}, {"DialTimeout (dial_timeout)", cfg.DialTimeout}, {"KeepAlive (keepalive)", cfg.KeepAlive}})
}

func checkTemplate(what, tmpl, placeholder string) error {
	if !strings.Contains(tmpl, placeholder) {
		return configErrorf("%s %q has no %s; use e.g. %q", what, tmpl, placeholder, DefaultTopicTemplate)
	}
	if strings.ContainsAny(strings.ReplaceAll(tmpl, placeholder, ""), "+#\x00") {
		return configErrorf(`%s %q contains a wildcard ("+" or "#") or NUL; a topic name may not`, what, tmpl)
	}
	return nil
}

func checkClientID(id string) error {
	if len(id) > 65535 || !utf8.ValidString(id) || strings.ContainsRune(id, 0) {
		return configErrorf("client id %q must be valid UTF-8 without NUL, at most 65535 bytes", id)
	}
	return nil
}

func checkDuration(name string, d time.Duration) error {
	if d < 0 {
		return configErrorf("%s is %s; it must be positive (or 0 for its default)", name, d)
	}
	return nil
}

// namedDuration is a duration field and how errors name it.
type namedDuration struct {
	name string
	v    time.Duration
}

// checkTimers reports the first duration that is not positive, or a
// keepalive longer than MQTT allows.
func checkTimers(keepAlive time.Duration, ds []namedDuration) error {
	for _, d := range ds {
		if err := checkDuration(d.name, d.v); err != nil {
			return err
		}
	}
	if keepAlive > 65535*time.Second {
		return configErrorf("KeepAlive is %s; MQTT allows at most 18h12m15s", keepAlive)
	}
	return nil
}

// topicNameProblem says why name cannot be the topic of a PUBLISH, or "".
// Sending such a topic would make the broker close the connection, which the
// relay would take for an outage and retry forever; refusing it here makes it
// an ordinary failure of that one message.
func topicNameProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > 65535:
		return "is longer than 65535 bytes"
	case !utf8.ValidString(name):
		return "is not valid UTF-8"
	case strings.ContainsAny(name, "+#"):
		return `contains a wildcard ("+" or "#"), which a topic name may not`
	case strings.ContainsRune(name, 0):
		return "contains NUL"
	case strings.HasPrefix(name, "$"):
		return `starts with "$", which brokers reserve for themselves`
	}
	return ""
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ParseURL returns the PublisherConfig that a broker URL describes, for a
// caller that takes the URL from the command line and then sets fields in
// Go: every query parameter is moved into its field (the TLS files loaded
// into TLS), the defaults are filled in except ClientID (each publisher
// needs its own), and URL keeps only the scheme, the credentials and the
// host. A field changed afterwards wins. Errors satisfy
// errors.Is(err, ErrConfig) and never contain the password.
func ParseURL(raw string) (PublisherConfig, error) {
	st, err := PublisherConfig{URL: raw}.settings()
	if err != nil {
		return PublisherConfig{}, err
	}
	cfg := st.PublisherConfig
	cfg.ClientID = st.url.params.Get("client_id")
	u := *st.url.server
	if st.url.user != "" || st.url.password != nil {
		u.User = url.UserPassword(st.url.user, string(st.url.password))
		if st.url.password == nil {
			u.User = url.User(st.url.user)
		}
	}
	cfg.URL = u.String()
	return cfg, nil
}

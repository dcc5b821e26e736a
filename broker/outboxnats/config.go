package outboxnats

import (
	"cmp"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outbox-go/outbox/internal/brokerconf"
	"github.com/outbox-go/outbox/internal/redelivery"
)

// Defaults applied to zero fields of PublisherConfig and SubscriberConfig.
const (
	DefaultSource             = "/outbox"
	DefaultSubject            = "outbox.{topic}"
	DefaultStream             = "OUTBOX"
	DefaultDuplicates         = 2 * time.Minute
	DefaultMaxAge             = time.Duration(0) // no age limit
	DefaultTimeout            = 5 * time.Second
	DefaultDeadLetterSubject  = "outbox_dead.{group}"
	DefaultDeadLetterStream   = "OUTBOX_DEAD"
	DefaultMaxDeliveries      = 5
	DefaultAckWait            = 30 * time.Second
	DefaultRedeliveryDelay    = redelivery.DefaultDelay
	DefaultRedeliveryDelayMax = redelivery.DefaultDelayMax
	DefaultDeadLetterAfter    = redelivery.DefaultDeadLetterAfter
	DefaultPrefetch           = 16
)

// ErrConfig is what every configuration error of NewPublisher,
// NewSubscriber and ParseURL satisfies (errors.Is): a bad URL,
// query parameter or config field, as opposed to a server that cannot be
// reached.
var ErrConfig = errors.New("outboxnats: bad configuration")

var configErrorf = brokerconf.Errorf("outboxnats", ErrConfig)

const (
	topicVar = "{topic}"
	groupVar = "{group}"
)

// PublisherConfig configures a Publisher. Zero fields take their defaults, or
// the value of the URL's query parameter of the same meaning; a field that is
// set wins over the URL.
type PublisherConfig struct {
	// URL is the broker URL, nats://host:4222, with more servers separated by
	// commas, user:password@ or token@ before a host, and the query
	// parameters described in the package documentation. Required.
	URL string
	// Source is the CloudEvents source attribute. Defaults to "/outbox".
	Source string
	// Subject is the subject template of a message, with {topic} as its last
	// token(s), e.g. "outbox.{topic}"; the query parameter is "subject".
	// Defaults to "outbox.{topic}".
	Subject string
	// Stream is the JetStream stream that stores the messages; NewPublisher
	// creates it over Subject's prefix followed by ">" when it does not exist
	// (query parameter "stream"). Defaults to "OUTBOX".
	Stream string
	// Duplicates is the stream's duplicate window: a second publish of a
	// msg_id within it is acked as a duplicate and not stored again. Used only
	// when NewPublisher creates the stream (query parameter "duplicates").
	// Defaults to 2m.
	Duplicates time.Duration
	// MaxAge is how long the stream keeps a message. Used only when
	// NewPublisher creates the stream (query parameter "max_age"). Zero or a
	// negative value keeps messages until someone removes them: a consumer
	// group away for longer than an age limit would lose messages the relay
	// already marked SENT. Defaults to no limit.
	MaxAge time.Duration
	// MemoryStorage creates the stream in memory instead of on disk (query
	// parameter "storage=memory"). Used only when NewPublisher creates the
	// stream. Defaults to false (file storage).
	MemoryStorage bool
	// Timeout bounds connecting, each JetStream API call, and the wait for
	// one message's PubAck (query parameter "timeout"). A PubAck that does not
	// come in time is reported as outbox.Unavailable: the message may or may
	// not be stored, and publishing it again is deduplicated. Defaults to 5s.
	Timeout time.Duration
	// Credentials is the path of a NATS credentials file (JWT and nkey seed)
	// (query parameter "creds"). Defaults to "" (none).
	Credentials string
	// NKeySeed is the path of a file holding a user's nkey seed, for servers
	// that authenticate users by nkey (query parameter "nkey"). Defaults to
	// "" (none).
	NKeySeed string
	// TLS, when set, is the TLS configuration of the connection, which must
	// then use TLS. The URL gives one with the tls_ca, tls_cert, tls_key and
	// tls_server_name parameters, and tls:// servers use the system's roots.
	// Defaults to nil.
	TLS *tls.Config
	// DialTimeout bounds each connection attempt (query parameter
	// "dial_timeout"). Defaults to Timeout.
	DialTimeout time.Duration
	// Conn, when set, is the connection the publisher uses instead of one of its
	// own; the URL's servers, Credentials, NKeySeed, TLS and DialTimeout are
	// then not used and the URL may hold only query parameters ("?stream=X")
	// or be empty. Close leaves it open. Defaults to nil.
	Conn *nats.Conn
	// Logger receives what the publisher has to say outside a Publish
	// result. Defaults to slog.Default().
	Logger *slog.Logger
}

// SubscriberConfig configures a Subscriber. Zero fields take their defaults,
// or the value of the URL's query parameter of the same meaning; a field that
// is set wins over the URL.
type SubscriberConfig struct {
	// URL is the broker URL, as for PublisherConfig.URL; "subject", "stream",
	// "timeout" and "creds" mean the same here. Required.
	URL string
	// Group is the consumer group: the subscribers of one group share one
	// durable JetStream consumer, named after the group (see ConsumerName).
	// Required.
	Group string
	// Topic selects the messages of one topic (the consumer's filter subject
	// is Subject with {topic} replaced); "" consumes every topic under the
	// subject template (query parameter "topic"). Defaults to "" (all).
	Topic string
	// Subject is the subject template, as for PublisherConfig.Subject.
	// Defaults to "outbox.{topic}".
	Subject string
	// Stream is the stream to consume; NewSubscriber creates it as
	// NewPublisher does when it does not exist, so either may start first.
	// Defaults to "OUTBOX".
	Stream string
	// MaxDeliveries is the least number of failed deliveries after which a
	// message goes to the dead-letter subject; it goes there once it has
	// also been failing for DeadLetterAfter (query parameter
	// "max_deliveries"). Defaults to 5.
	MaxDeliveries int
	// DeadLetterSubject is the subject template of the dead-letter path, with
	// {group} as its last token (query parameter "dead"). It must not be
	// covered by Stream's subjects. Defaults to "outbox_dead.{group}".
	DeadLetterSubject string
	// DeadLetterStream stores the dead letters; NewSubscriber creates it over
	// DeadLetterSubject's prefix followed by ">" when it does not exist, with
	// file storage and no age limit (query parameter "dead_stream").
	// Defaults to "OUTBOX_DEAD".
	DeadLetterStream string
	// AckWait is how long the broker waits for an ack before it delivers a
	// message again; while the handler runs, the subscriber tells the broker
	// every AckWait/2 that it is still working (query parameter "ack_wait").
	// Used when NewSubscriber creates the consumer. Defaults to 30s.
	AckWait time.Duration
	// RedeliveryDelay is how long a message whose handler failed waits
	// before it is delivered again (a nak with this delay); it doubles with
	// each delivery, up to RedeliveryDelayMax (query parameter
	// "redelivery_delay"). Defaults to 1s.
	RedeliveryDelay time.Duration
	// RedeliveryDelayMax caps the doubling of RedeliveryDelay (query
	// parameter "redelivery_delay_max"). Defaults to 1m.
	RedeliveryDelayMax time.Duration
	// DeadLetterAfter is how long a message must have been failing before
	// it goes to the dead-letter subject, at its MaxDeliveries-th failed
	// delivery or later. The broker's delivery count measures it: the n-th
	// delivery comes at least the sum of the first n-1 delays after the
	// first; a negative value asks for no such span (query parameter
	// "dead_letter_after"). Defaults to 10m.
	DeadLetterAfter time.Duration
	// DeliverNew makes a new group start with the messages published after
	// its consumer is created, instead of every message the stream holds
	// (query parameter "deliver=new"). Defaults to false (all).
	DeliverNew bool
	// Prefetch is how many messages the subscriber asks the broker for
	// ahead of the handler (query parameter "prefetch"). Defaults to 16.
	// A fetched message's AckWait runs while it waits its turn, and only the
	// message in hand is kept in progress: keep Prefetch times the
	// handler's time well under AckWait, or waiting messages are delivered
	// again. A copy that reaches this subscriber after it settled the
	// message (acked or dead-lettered) is acked without being handled; any
	// other copy is handled (the inbox absorbs it) and counts towards
	// MaxDeliveries. At a graceful stop Run hands the fetched messages it
	// holds back at once (a Nak), but a message the broker was still
	// sending when the subscription ended is lost on the way and reaches
	// another subscriber only after AckWait: in the conformance suite about
	// every other stop leaves one so. The client cannot withdraw a pull
	// request it has sent (nats-io/nats.go#2103). Nothing is lost; a rolling
	// restart may delay up to Prefetch messages by AckWait.
	Prefetch int
	// Timeout bounds connecting, each JetStream API call, each confirmed ack
	// and each dead-letter publish. Defaults to 5s.
	Timeout time.Duration
	// Credentials is the path of a NATS credentials file (JWT and nkey seed)
	// (query parameter "creds"). Defaults to "" (none).
	Credentials string
	// NKeySeed, TLS, DialTimeout and Conn are as for PublisherConfig; the
	// query parameters are the same. Close leaves Conn open.
	NKeySeed    string
	TLS         *tls.Config
	DialTimeout time.Duration
	Conn        *nats.Conn
	// Logger receives what the subscriber cannot return: a failed ack, a
	// dead-lettered message, a dead-letter publish that failed. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// publisherSettings is a PublisherConfig after defaults, URL and validation.
type publisherSettings struct {
	PublisherConfig
	url    *brokerURL
	prefix string // subject prefix, "outbox."
}

func (cfg PublisherConfig) settings() (*publisherSettings, error) {
	u, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	u.q.String(&cfg.Subject, "subject")
	u.q.String(&cfg.Stream, "stream")
	if err := u.conn(&cfg.Credentials, &cfg.NKeySeed, &cfg.DialTimeout, &cfg.TLS, cfg.Conn); err != nil {
		return nil, err
	}
	for _, d := range []struct {
		dst  *time.Duration
		name string
	}{{&cfg.Duplicates, "duplicates"}, {&cfg.MaxAge, "max_age"}, {&cfg.Timeout, "timeout"}} {
		if err := u.q.SignedDuration(d.dst, d.name); err != nil {
			return nil, err
		}
	}
	switch st := u.query.Get("storage"); st {
	case "", "file":
	case "memory":
		cfg.MemoryStorage = true
	default:
		return nil, configErrorf("URL parameter storage=%q; use storage=file or storage=memory", st)
	}
	if cfg.Source == "" {
		cfg.Source = DefaultSource
	}
	if cfg.Subject == "" {
		cfg.Subject = DefaultSubject
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if cfg.Duplicates == 0 {
		cfg.Duplicates = DefaultDuplicates
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	prefix, err := subjectPrefix("Subject", "subject", cfg.Subject, topicVar)
	if err != nil {
		return nil, err
	}
	if err := checkStreamName("Stream", "stream", cfg.Stream); err != nil {
		return nil, err
	}
	if _, err := url.Parse(cfg.Source); err != nil {
		return nil, configErrorf("Source %q is not a URI reference (%v); use e.g. \"/outbox\"", cfg.Source, err)
	}
	switch {
	case cfg.Duplicates < 0:
		return nil, configErrorf("Duplicates (duplicates) is %s; it must be positive", cfg.Duplicates)
	case cfg.MaxAge > 0 && cfg.Duplicates > cfg.MaxAge:
		return nil, configErrorf("Duplicates (duplicates) %s is longer than MaxAge (max_age) %s; the duplicate window cannot outlast the messages", cfg.Duplicates, cfg.MaxAge)
	case cfg.Timeout < 0:
		return nil, configErrorf("Timeout (timeout) is %s; it must be positive", cfg.Timeout)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.DialTimeout = cmp.Or(cfg.DialTimeout, cfg.Timeout)
	return &publisherSettings{PublisherConfig: cfg, url: u, prefix: prefix}, nil
}

// subscriberSettings is a SubscriberConfig after defaults, URL and validation.
type subscriberSettings struct {
	SubscriberConfig
	url        *brokerURL
	stream     *publisherSettings // how to create the stream when it is missing
	filter     string             // the consumer's filter subject
	consumer   string             // the durable consumer's name
	deadPrefix string             // dead-letter subject prefix, "outbox_dead."
	redelivery redelivery.Policy
}

func (cfg SubscriberConfig) settings() (*subscriberSettings, error) {
	u, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if err := cfg.fromURL(u); err != nil {
		return nil, err
	}
	policy, err := cfg.setDefaults()
	if err != nil {
		return nil, err
	}
	if err := cfg.checkGroup(); err != nil {
		return nil, err
	}
	filter, deadPrefix, err := cfg.subjects()
	if err != nil {
		return nil, err
	}
	if err := cfg.checkStreams(); err != nil {
		return nil, err
	}
	if err := cfg.checkLimits(); err != nil {
		return nil, err
	}
	// The stream is created as a publisher would create it, from the same
	// URL parameters (duplicates, max_age, storage).
	cfg.DialTimeout = cmp.Or(cfg.DialTimeout, cfg.Timeout)
	stream, err := PublisherConfig{URL: cfg.URL, Subject: cfg.Subject, Stream: cfg.Stream, Timeout: cfg.Timeout,
		TLS: cfg.TLS, Conn: cfg.Conn}.settings()
	if err != nil {
		return nil, err
	}
	return &subscriberSettings{
		SubscriberConfig: cfg,
		stream:           stream,
		url:              u,
		filter:           filter,
		consumer:         ConsumerName(cfg.Group),
		deadPrefix:       deadPrefix,
		redelivery:       policy,
	}, nil
}

// fromURL fills the fields the URL's query parameters set.
func (cfg *SubscriberConfig) fromURL(u *brokerURL) error {
	u.q.String(&cfg.Topic, "topic")
	u.q.String(&cfg.Subject, "subject")
	u.q.String(&cfg.Stream, "stream")
	u.q.String(&cfg.DeadLetterSubject, "dead")
	u.q.String(&cfg.DeadLetterStream, "dead_stream")
	if err := u.conn(&cfg.Credentials, &cfg.NKeySeed, &cfg.DialTimeout, &cfg.TLS, cfg.Conn); err != nil {
		return err
	}
	for _, d := range []struct {
		dst  *time.Duration
		name string
	}{{&cfg.AckWait, "ack_wait"}, {&cfg.RedeliveryDelay, "redelivery_delay"}, {&cfg.RedeliveryDelayMax, "redelivery_delay_max"},
		{&cfg.DeadLetterAfter, "dead_letter_after"}, {&cfg.Timeout, "timeout"}} {
		if err := u.q.SignedDuration(d.dst, d.name); err != nil {
			return err
		}
	}
	if err := u.q.Int(&cfg.MaxDeliveries, "max_deliveries"); err != nil {
		return err
	}
	if err := u.q.Int(&cfg.Prefetch, "prefetch"); err != nil {
		return err
	}
	switch d := u.query.Get("deliver"); d {
	case "", "all":
	case "new":
		cfg.DeliverNew = true
	default:
		return configErrorf("URL parameter deliver=%q; use deliver=all or deliver=new", d)
	}
	return nil
}

// setDefaults fills the zero fields with their defaults and returns the
// redelivery policy, or an error when its delays contradict each other.
func (cfg *SubscriberConfig) setDefaults() (redelivery.Policy, error) {
	if cfg.Subject == "" {
		cfg.Subject = DefaultSubject
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if cfg.MaxDeliveries == 0 {
		cfg.MaxDeliveries = DefaultMaxDeliveries
	}
	if cfg.DeadLetterSubject == "" {
		cfg.DeadLetterSubject = DefaultDeadLetterSubject
	}
	if cfg.DeadLetterStream == "" {
		cfg.DeadLetterStream = DefaultDeadLetterStream
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = DefaultAckWait
	}
	policy := redelivery.Policy{MaxDeliveries: cfg.MaxDeliveries, Delay: cfg.RedeliveryDelay,
		DelayMax: cfg.RedeliveryDelayMax, DeadLetterAfter: cfg.DeadLetterAfter}.Defaults()
	if reason := policy.Check("RedeliveryDelay (redelivery_delay)", "RedeliveryDelayMax (redelivery_delay_max)"); reason != "" {
		return policy, configErrorf("%s", reason)
	}
	cfg.RedeliveryDelay, cfg.RedeliveryDelayMax, cfg.DeadLetterAfter = policy.Delay, policy.DelayMax, policy.DeadLetterAfter
	if cfg.Prefetch == 0 {
		cfg.Prefetch = DefaultPrefetch
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return policy, nil
}

// checkGroup reports a Group the inbox cannot store.
func (cfg *SubscriberConfig) checkGroup() error {
	if strings.TrimSpace(cfg.Group) == "" {
		return configErrorf("SubscriberConfig.Group is empty; name the consumer group, e.g. \"billing\"")
	}
	if len(cfg.Group) > 64 {
		return configErrorf("SubscriberConfig.Group %q is longer than 64 bytes (the inbox's consumer_group column)", cfg.Group)
	}
	return nil
}

// subjects returns the consumer's filter subject and the dead-letter
// subject prefix, or an error when the subjects are malformed or the dead
// letters would land under the messages' subjects.
func (cfg *SubscriberConfig) subjects() (filter, deadPrefix string, err error) {
	prefix, err := subjectPrefix("Subject", "subject", cfg.Subject, topicVar)
	if err != nil {
		return "", "", err
	}
	filter = prefix + ">"
	if cfg.Topic != "" {
		filter = prefix + cfg.Topic
		if err := checkSubject(filter); err != nil {
			return "", "", configErrorf("Topic %q makes the subject %q, %v", cfg.Topic, filter, err)
		}
	}
	deadPrefix, err = subjectPrefix("DeadLetterSubject", "dead", cfg.DeadLetterSubject, groupVar)
	if err != nil {
		return "", "", err
	}
	if subjectsOverlap(prefix+">", deadPrefix+">") {
		return "", "", configErrorf("DeadLetterSubject %q lies under the messages' subjects %q, so the dead letters would land in stream %s again; pick a prefix outside it, e.g. %q",
			cfg.DeadLetterSubject, prefix+">", cfg.Stream, DefaultDeadLetterSubject)
	}
	return filter, deadPrefix, nil
}

// checkStreams reports a malformed stream name, or a dead-letter stream
// that is the messages' stream.
func (cfg *SubscriberConfig) checkStreams() error {
	if err := checkStreamName("Stream", "stream", cfg.Stream); err != nil {
		return err
	}
	if err := checkStreamName("DeadLetterStream", "dead_stream", cfg.DeadLetterStream); err != nil {
		return err
	}
	if cfg.DeadLetterStream == cfg.Stream {
		return configErrorf("DeadLetterStream and Stream are both %q; the dead letters need a stream of their own", cfg.Stream)
	}
	return nil
}

// checkLimits reports a count or duration out of range.
func (cfg *SubscriberConfig) checkLimits() error {
	switch {
	case cfg.MaxDeliveries < 0:
		return configErrorf("MaxDeliveries (max_deliveries) is %d; it must be at least 1", cfg.MaxDeliveries)
	case cfg.AckWait < 0 || (cfg.AckWait > 0 && cfg.AckWait < time.Second):
		return configErrorf("AckWait (ack_wait) is %s; it must be at least 1s", cfg.AckWait)
	case cfg.Prefetch < 0:
		return configErrorf("Prefetch (prefetch) is %d; it must be at least 1", cfg.Prefetch)
	case cfg.Timeout < 0:
		return configErrorf("Timeout (timeout) is %s; it must be positive", cfg.Timeout)
	}
	return nil
}

// subjectPrefix checks a template that ends with variable as its last
// token(s) ("outbox.{topic}") and returns what comes before ("outbox.").
func subjectPrefix(field, param, tmpl, variable string) (string, error) {
	example := strings.TrimSuffix(DefaultSubject, topicVar) + variable
	if variable == groupVar {
		example = DefaultDeadLetterSubject
	}
	prefix, ok := strings.CutSuffix(tmpl, "."+variable)
	if !ok || strings.Contains(prefix, variable) || strings.Contains(prefix, "{") {
		return "", configErrorf("%s (%s) %q must be a subject prefix followed by .%s, e.g. %q", field, param, tmpl, variable, example)
	}
	if err := checkSubject(prefix); err != nil {
		return "", configErrorf("%s (%s) %q: the prefix %q %v", field, param, tmpl, prefix, err)
	}
	return prefix + ".", nil
}

// checkSubject checks a literal subject a message can be published to: dot
// separated non-empty tokens, no whitespace or control characters, and no
// wildcard token.
func checkSubject(s string) error {
	if s == "" {
		return fmt.Errorf("is empty")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("contains whitespace or a control character (byte %d), which NATS subjects cannot carry", i)
		}
	}
	for _, tok := range strings.Split(s, ".") {
		switch tok {
		case "":
			return fmt.Errorf("has an empty token (a leading, trailing or double dot)")
		case "*", ">":
			return fmt.Errorf("has the wildcard token %q", tok)
		}
	}
	return nil
}

// subjectsOverlap reports whether two subjects (with wildcards) can match a
// common subject.
func subjectsOverlap(a, b string) bool {
	ta, tb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(ta) && i < len(tb); i++ {
		x, y := ta[i], tb[i]
		if x == ">" || y == ">" {
			return true
		}
		if x != "*" && y != "*" && x != y {
			return false
		}
	}
	return len(ta) == len(tb)
}

// subjectCovers reports whether every subject matching sub also matches
// pattern (both may hold wildcards).
func subjectCovers(pattern, sub string) bool {
	tp, ts := strings.Split(pattern, "."), strings.Split(sub, ".")
	for i, p := range tp {
		if p == ">" {
			return i < len(ts)
		}
		if i >= len(ts) {
			return false
		}
		s := ts[i]
		if s == ">" {
			return false
		}
		if p != "*" && (s == "*" || p != s) {
			return false
		}
	}
	return len(tp) == len(ts)
}

// checkStreamName checks a JetStream stream name.
func checkStreamName(field, param, name string) error {
	if name == "" || len(name) > 255 || strings.ContainsAny(name, ".*> \t\r\n/\\") {
		return configErrorf("%s (%s) %q is not a valid stream name; use letters, digits, '-' and '_', e.g. %q", field, param, name, DefaultStream)
	}
	return nil
}

// ConsumerName returns the durable JetStream consumer name of a consumer
// group: the group itself when it is made of ASCII letters, digits, '-' and
// '_' only, else those characters with '_' for every other one, followed by
// '_' and 8 hex digits of the group's SHA-256 so that different groups never
// share a consumer. The same name is the last token of the group's
// dead-letter subject.
func ConsumerName(group string) string {
	clean := true
	b := make([]byte, 0, len(group)+9)
	for i := 0; i < len(group); i++ {
		c := group[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b = append(b, c)
		default:
			b = append(b, '_')
			clean = false
		}
	}
	if clean && len(b) > 0 {
		return string(b)
	}
	sum := sha256.Sum256([]byte(group))
	return string(b) + "_" + hex.EncodeToString(sum[:4])
}

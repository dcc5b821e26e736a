package outboxredis

import (
	"cmp"
	"crypto/tls"
	"errors"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox/cloudevents"
	"github.com/outbox-go/outbox/internal/brokerconf"
	"github.com/outbox-go/outbox/internal/redelivery"
)

// Defaults applied to zero fields of PublisherConfig and SubscriberConfig.
const (
	// DefaultStream is the stream key template: one stream per topic.
	DefaultStream = "outbox:{topic}"
	// DefaultClusterStream is the stream key template in a Redis Cluster:
	// the topic in braces is the key's hash tag, which the dead-letter
	// streams share.
	DefaultClusterStream = "outbox:{{topic}}"
	// DefaultDeadLetterStream is the dead-letter stream key template: one per
	// consumed stream and group.
	DefaultDeadLetterStream = "{stream}:dead:{group}"
	// DefaultPipelineSize is the most XADD commands sent in one pipeline.
	DefaultPipelineSize = 1000
	// DefaultMaxDeliveries is how many times a subscriber hands a message to
	// its handler before dead-lettering it.
	DefaultMaxDeliveries = 5
	// DefaultMinIdle is how long a delivered, unacknowledged entry stays with
	// its consumer before another consumer (or the same one) reclaims it.
	DefaultMinIdle = 30 * time.Second
	// DefaultBlock is how long one XREADGROUP waits for new entries.
	DefaultBlock = time.Second
	// DefaultBatchSize is the most entries one XREADGROUP or XAUTOCLAIM returns.
	DefaultBatchSize = 64
	// DefaultStopTimeout is how long the handler in hand may run on after
	// Run's context ended before its own context is canceled.
	DefaultStopTimeout = 30 * time.Second
)

// ErrConfig is what every configuration error satisfies (errors.Is); the
// error's text names the field or URL parameter to fix.
var ErrConfig = errors.New("outboxredis: bad configuration")

// ErrInvalidConfig is ErrConfig.
//
// Deprecated: use ErrConfig, the name every adapter uses.
var ErrInvalidConfig = ErrConfig

var configErrorf = brokerconf.Errorf("outboxredis", ErrConfig)

// PublisherConfig configures a Publisher. Zero fields take their defaults,
// and a field that is set wins over the matching URL query parameter.
type PublisherConfig struct {
	// URL is the Redis URL, redis://[user:password@]host:port/db or
	// rediss://... for TLS, with the query parameters described in the
	// package documentation (stream, maxlen, and go-redis's own such as
	// dial_timeout). Required.
	URL string
	// Source is the CloudEvents source attribute, carried as the ce_source
	// field. Defaults to "/outbox".
	Source string
	// Stream is the template of the stream key a message is added to;
	// "{topic}" in it is replaced by the message's topic. A template without
	// "{topic}" sends every topic to one stream. Defaults to the URL's stream
	// parameter, else "outbox:{topic}".
	Stream string
	// MaxLen, when positive, trims each stream to about this many entries on
	// every XADD (MAXLEN ~ N): older entries go even if a group has not read
	// them yet. Defaults to the URL's maxlen parameter, else 0 (no trimming).
	MaxLen int64
	// PipelineSize is the most XADD commands sent in one pipeline; a larger
	// batch goes as several pipelines, one after another. Defaults to 1000.
	PipelineSize int
	// TLS, when set, is the TLS configuration of every connection, instead
	// of the URL's (rediss:// with the system's roots, or the tls_ca,
	// tls_cert, tls_key and tls_server_name parameters). Defaults to nil.
	TLS *tls.Config
	// DialTimeout bounds each connection attempt. Defaults to the URL's
	// dial_timeout parameter, else go-redis's 5s.
	DialTimeout time.Duration
	// Logger receives what the publisher has to say outside its results.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Client, when set, is the client the publisher uses instead of one of its
	// own, for a deployment the URL cannot describe (a *redis.ClusterClient
	// or a failover client with options of your own); the URL, TLS and
	// DialTimeout are then not used and the URL may be empty. Close leaves
	// it open. Defaults to nil.
	Client redis.UniversalClient
}

// SubscriberConfig configures a Subscriber. Zero fields take their defaults,
// and a field that is set wins over the matching URL query parameter.
type SubscriberConfig struct {
	// URL is the Redis URL; its query parameters are those of
	// PublisherConfig.URL plus dead, minidle and maxdeliveries. Required.
	URL string
	// Group is the consumer group: every group gets each message once, and
	// the subscribers of one group share its messages. Required.
	Group string
	// Topic is the topic whose stream is consumed: it fills "{topic}" in
	// Stream. Required when Stream contains "{topic}". Defaults to "".
	Topic string
	// Stream is the stream key template, as in PublisherConfig: keep the two
	// equal. Defaults to the URL's stream parameter, else "outbox:{topic}".
	Stream string
	// DeadLetterStream is the template of the stream that dead letters are
	// added to; "{stream}", "{group}" and "{topic}" in it are replaced.
	// Defaults to the URL's dead parameter, else "{stream}:dead:{group}".
	DeadLetterStream string
	// Consumer is this subscriber's consumer name within the group. Two
	// subscribers must not share one. Defaults to "<hostname>-<pid>-<random>".
	Consumer string
	// MaxDeliveries is the least number of failed handler calls after which
	// a message goes to the dead-letter stream; it goes there once it has
	// also been failing for DeadLetterAfter. Defaults to the URL's
	// maxdeliveries (or max_deliveries) parameter, else 5.
	MaxDeliveries int
	// RedeliveryDelay is the pause before a message whose handler failed is
	// handed to the handler again; it doubles with each failure, up to
	// RedeliveryDelayMax. The subscriber keeps the entry claimed meanwhile,
	// and the entries behind it wait. Defaults to the URL's
	// redelivery_delay parameter, else 1s.
	RedeliveryDelay time.Duration
	// RedeliveryDelayMax caps the doubling of RedeliveryDelay. Defaults to
	// the URL's redelivery_delay_max parameter, else 1m.
	RedeliveryDelayMax time.Duration
	// DeadLetterAfter is how long a message must have been failing (since
	// its first failed handler call in this subscriber) before it goes to
	// the dead-letter stream, at its MaxDeliveries-th failure or later; a
	// negative value asks for no such span. Defaults to the URL's
	// dead_letter_after parameter, else 10m.
	DeadLetterAfter time.Duration
	// MinIdle is how long a delivered entry may stay unacknowledged before
	// it is delivered again (XAUTOCLAIM): how soon the messages of a
	// subscriber that died, or stopped while its handler was failing, move
	// on. While a subscriber holds entries (a slow handler, or a failing one
	// waiting for its next call) it keeps them claimed every MinIdle/2, so
	// they are not delivered twice. Defaults to the URL's minidle parameter,
	// else 30s.
	MinIdle time.Duration
	// Block is how long one XREADGROUP waits for new entries: it bounds how
	// long Run takes to return after its context ends when it is idle.
	// Defaults to 1s (at most MinIdle/2).
	Block time.Duration
	// BatchSize is the most entries read (or reclaimed) at once. Defaults to 64.
	BatchSize int
	// Concurrency is how many messages one Run hands to the handler at
	// once. Above 1, the entries of one read go by key (outbox.GoByKey):
	// the messages of one key one at a time, in stream order, the
	// redeliveries of a failing one holding back only its key; different
	// keys, and messages without a key, in parallel. The next read waits
	// until every entry of the read is settled. Defaults to 1: one message
	// at a time, in stream order.
	Concurrency int
	// StartFromBeginning makes NewSubscriber create a new group at the start
	// of the stream, so that it also gets the entries the stream already
	// holds. An existing group keeps its position. Defaults to false (a new
	// group gets the entries added after NewSubscriber returns).
	StartFromBeginning bool
	// StopTimeout is how long the handler in hand may still run after Run's
	// context ended before the handler's own context is canceled. Defaults
	// to 30s.
	StopTimeout time.Duration
	// TLS, DialTimeout and Client are as for PublisherConfig. Close leaves
	// Client open.
	TLS         *tls.Config
	DialTimeout time.Duration
	Client      redis.UniversalClient
}

// params are this package's URL query parameters, removed from the URL
// before go-redis parses the rest.
type params struct {
	stream        string
	maxLen        int64
	dead          string
	minIdle       time.Duration
	maxDeliveries int
	// redelivery_delay, redelivery_delay_max, dead_letter_after
	redeliveryDelay, redeliveryDelayMax, deadLetterAfter time.Duration
}

// ownParams are the query parameters this package reads; go-redis reads
// the others (dial_timeout, pool_size, ...) and refuses what it does not know.
var ownParams = []string{
	"stream", "maxlen", "dead", "minidle", "maxdeliveries", "max_deliveries",
	"redelivery_delay", "redelivery_delay_max", "dead_letter_after",
}

func ownParam(name string) bool { return slices.Contains(ownParams, name) }

// parseURL splits raw into the connection and this package's parameters.
// tlsCfg, when set, wins over the URL's TLS parameters. Errors never quote
// the URL itself, which may hold a password.
func parseURL(raw string, tlsCfg *tls.Config, dialTimeout time.Duration) (*connection, params, error) {
	var p params
	if strings.TrimSpace(raw) == "" {
		return nil, p, configErrorf(`URL is empty; set it to the Redis server, e.g. "redis://localhost:6379/0"`)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, p, configErrorf(`URL is not a valid URL (%v); use e.g. "redis://user:password@localhost:6379/0"`, err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, p, configErrorf("URL %q has scheme %q; use redis:// (or rediss:// for TLS)", u.Redacted(), u.Scheme)
	}
	if u.Host == "" {
		return nil, p, configErrorf(`URL %q has no host; use e.g. "redis://localhost:6379/0"`, u.Redacted())
	}
	q := brokerconf.NewQuery(u.Query(), configErrorf)
	for _, name := range []string{"stream", "dead"} {
		if q.Has(name) && q.Get(name) == "" {
			return nil, p, configErrorf("URL parameter %s is empty; give a key template such as %q", name, map[string]string{"stream": DefaultStream, "dead": DefaultDeadLetterStream}[name])
		}
	}
	q.String(&p.stream, "stream")
	q.String(&p.dead, "dead")
	for _, err := range []error{
		q.Int64(&p.maxLen, "maxlen"), q.Duration(&p.minIdle, "minidle"),
		q.Int(&p.maxDeliveries, "maxdeliveries"), q.Int(&p.maxDeliveries, "max_deliveries"),
		q.Duration(&p.redeliveryDelay, "redelivery_delay"), q.Duration(&p.redeliveryDelayMax, "redelivery_delay_max"),
		q.Duration(&p.deadLetterAfter, "dead_letter_after"),
	} {
		if err != nil {
			return nil, p, err
		}
	}
	c, err := newConnection(u, q, tlsCfg, dialTimeout)
	if err != nil {
		return nil, p, err
	}
	return c, p, nil
}

func redactedWithoutQuery(u *url.URL) string {
	c := *u
	c.RawQuery = ""
	return c.Redacted()
}

// open returns the connection of cfg's URL and its parameters, or the
// caller's client.
func open(raw string, own redis.UniversalClient, tlsCfg *tls.Config, dialTimeout time.Duration) (*connection, params, error) {
	if own != nil && raw == "" {
		_, cluster := own.(*redis.ClusterClient)
		return &connection{addr: "the caller's client", own: own, cluster: cluster}, params{}, nil
	}
	c, p, err := parseURL(raw, tlsCfg, dialTimeout)
	if err == nil && own != nil {
		_, c.cluster = own.(*redis.ClusterClient)
		c.own = own
	}
	return c, p, err
}

// defaultStream is the stream template when none is given: in a Cluster,
// the topic is the key's hash tag, so that a stream and its dead-letter
// streams share a slot.
func (c *connection) defaultStream() string {
	if c.cluster {
		return DefaultClusterStream
	}
	return DefaultStream
}

func (cfg PublisherConfig) resolve() (PublisherConfig, *connection, error) {
	opts, p, err := open(cfg.URL, cfg.Client, cfg.TLS, cfg.DialTimeout)
	if err != nil {
		return cfg, nil, err
	}
	if cfg.Source == "" {
		cfg.Source = cloudevents.DefaultSource
	}
	if cfg.Stream == "" {
		cfg.Stream = p.stream
	}
	if cfg.Stream == "" {
		cfg.Stream = opts.defaultStream()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxLen == 0 {
		cfg.MaxLen = p.maxLen
	}
	if cfg.PipelineSize == 0 {
		cfg.PipelineSize = DefaultPipelineSize
	}
	switch {
	case cfg.MaxLen < 0:
		return cfg, nil, configErrorf("PublisherConfig.MaxLen is %d; it must be positive (or 0 to keep every entry)", cfg.MaxLen)
	case cfg.PipelineSize < 0:
		return cfg, nil, configErrorf("PublisherConfig.PipelineSize is %d; it must be positive (or 0 for the default of %d)", cfg.PipelineSize, DefaultPipelineSize)
	}
	if _, err := url.Parse(cfg.Source); err != nil {
		return cfg, nil, configErrorf(`PublisherConfig.Source %q is not a URI reference (%v); use e.g. "/outbox"`, cfg.Source, err)
	}
	return cfg, opts, nil
}

func (cfg SubscriberConfig) resolve() (SubscriberConfig, *connection, error) {
	opts, p, err := open(cfg.URL, cfg.Client, cfg.TLS, cfg.DialTimeout)
	if err != nil {
		return cfg, nil, err
	}
	if cfg.Stream == "" {
		cfg.Stream = p.stream
	}
	if cfg.Stream == "" {
		cfg.Stream = opts.defaultStream()
	}
	if cfg.DeadLetterStream == "" {
		cfg.DeadLetterStream = p.dead
	}
	if cfg.DeadLetterStream == "" {
		cfg.DeadLetterStream = DefaultDeadLetterStream
	}
	if cfg.MaxDeliveries == 0 {
		cfg.MaxDeliveries = p.maxDeliveries
	}
	if cfg.MaxDeliveries == 0 {
		cfg.MaxDeliveries = DefaultMaxDeliveries
	}
	cfg.RedeliveryDelay = cmp.Or(cfg.RedeliveryDelay, p.redeliveryDelay)
	cfg.RedeliveryDelayMax = cmp.Or(cfg.RedeliveryDelayMax, p.redeliveryDelayMax)
	cfg.DeadLetterAfter = cmp.Or(cfg.DeadLetterAfter, p.deadLetterAfter)
	policy := redelivery.Policy{MaxDeliveries: cfg.MaxDeliveries, Delay: cfg.RedeliveryDelay,
		DelayMax: cfg.RedeliveryDelayMax, DeadLetterAfter: cfg.DeadLetterAfter}.Defaults()
	if reason := policy.Check("SubscriberConfig.RedeliveryDelay", "SubscriberConfig.RedeliveryDelayMax"); reason != "" {
		return cfg, nil, configErrorf("%s", reason)
	}
	cfg.RedeliveryDelay, cfg.RedeliveryDelayMax, cfg.DeadLetterAfter = policy.Delay, policy.DelayMax, policy.DeadLetterAfter
	if cfg.MinIdle == 0 {
		cfg.MinIdle = p.minIdle
	}
	if cfg.MinIdle == 0 {
		cfg.MinIdle = DefaultMinIdle
	}
	if cfg.Block == 0 {
		cfg.Block = min(DefaultBlock, cfg.MinIdle/2)
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.Consumer == "" {
		cfg.Consumer = defaultConsumer()
	}
	switch {
	case strings.TrimSpace(cfg.Group) == "":
		return cfg, nil, configErrorf("SubscriberConfig.Group is empty; name the consumer group, e.g. \"billing\"")
	case strings.Contains(cfg.Stream, "{topic}") && cfg.Topic == "":
		return cfg, nil, configErrorf("SubscriberConfig.Topic is empty but the stream template %q contains {topic}; set Topic to the topic to consume", cfg.Stream)
	case cfg.MaxDeliveries < 0:
		return cfg, nil, configErrorf("SubscriberConfig.MaxDeliveries is %d; it must be positive (or 0 for the default of %d)", cfg.MaxDeliveries, DefaultMaxDeliveries)
	case cfg.MinIdle < 0:
		return cfg, nil, configErrorf("SubscriberConfig.MinIdle is %s; it must be positive (or 0 for the default of %s)", cfg.MinIdle, DefaultMinIdle)
	case cfg.Block < time.Millisecond:
		return cfg, nil, configErrorf("SubscriberConfig.Block is %s; it must be at least 1ms (or 0 for the default of %s)", cfg.Block, DefaultBlock)
	case cfg.BatchSize < 0:
		return cfg, nil, configErrorf("SubscriberConfig.BatchSize is %d; it must be positive (or 0 for the default of %d)", cfg.BatchSize, DefaultBatchSize)
	case cfg.StopTimeout < 0:
		return cfg, nil, configErrorf("SubscriberConfig.StopTimeout is %s; it must be positive (or 0 for the default of %s)", cfg.StopTimeout, DefaultStopTimeout)
	case cfg.Concurrency < 0:
		return cfg, nil, configErrorf("SubscriberConfig.Concurrency is %d; it must be positive (or 0 for one message at a time)", cfg.Concurrency)
	}
	if opts.cluster {
		stream := streamKey(cfg.Stream, cfg.Topic)
		if dead := deadKey(cfg.DeadLetterStream, stream, cfg.Group, cfg.Topic); hashTag(dead) != hashTag(stream) {
			return cfg, nil, configErrorf("in a Redis Cluster the dead-letter stream %q must share the hash tag of stream %q (a {tag} in the key), or moving a message there fails; use Stream %q", dead, stream, DefaultClusterStream)
		}
	}
	return cfg, opts, nil
}

// streamKey fills a stream template with a topic.
func streamKey(template, topic string) string {
	return strings.ReplaceAll(template, "{topic}", topic)
}

// deadKey fills a dead-letter template.
func deadKey(template, stream, group, topic string) string {
	return strings.NewReplacer("{stream}", stream, "{group}", group, "{topic}", topic).Replace(template)
}

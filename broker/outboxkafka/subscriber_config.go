package outboxkafka

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox/internal/redelivery"
)

// SubscriberConfig configures a Subscriber. As for PublisherConfig, a field
// left zero takes the value of the URL's query parameter, then its default.
type SubscriberConfig struct {
	// URL is the broker URL, as for the publisher; its query parameters set
	// the options below. Required.
	URL string
	// Group is the Kafka consumer group. Subscribers of one group share the
	// partitions; each group gets every message. Required.
	Group string
	// Topics are the row topics to consume (e.g. "order.paid"); each is put
	// through Destination to name the Kafka topic. Required.
	Topics []string
	// Destination is the publisher's destination template, so that Topics
	// name the same Kafka topics the publisher writes to. URL parameter
	// "topic". Defaults to "{topic}".
	Destination string
	// MaxDeliveries is the least number of failed handler calls after which
	// a message goes to the dead-letter topic; it goes there once it has
	// also been failing for DeadLetterAfter. URL parameter "max_deliveries".
	// Defaults to 5.
	MaxDeliveries int
	// RedeliveryDelay is the pause before a message whose handler failed is
	// handed to the handler again; it doubles with each failure, up to
	// RedeliveryDelayMax. The record's partition waits meanwhile. URL
	// parameter "redelivery_delay". Defaults to 1s.
	RedeliveryDelay time.Duration
	// RedeliveryDelayMax caps the doubling of RedeliveryDelay. URL parameter
	// "redelivery_delay_max". Defaults to 1m.
	RedeliveryDelayMax time.Duration
	// DeadLetterAfter is how long a message must have been failing (since its
	// first failed handler call in this process) before it goes to the
	// dead-letter topic, at its MaxDeliveries-th failure or later; a
	// negative value asks for no such span. URL parameter
	// "dead_letter_after". Defaults to 10m.
	DeadLetterAfter time.Duration
	// RetryBackoff is the pause before a failed fetch, or a produce to the
	// dead-letter topic that failed, is tried again; it doubles with each
	// failure, up to 20 times its value. It does not pace the handler's
	// redeliveries (RedeliveryDelay does). URL parameter "retry_backoff".
	// Defaults to 100ms.
	RetryBackoff time.Duration
	// DeadLetterTopic is the topic a message goes to after MaxDeliveries
	// failed deliveries (or one outbox.Permanent failure), as a template in
	// which "{topic}" stands for the Kafka topic it was consumed from.
	// NewSubscriber creates it (with the broker's default partitions and
	// replication) when it does not exist. URL parameter "dlt". Defaults to
	// "{topic}.dlt".
	DeadLetterTopic string
	// Concurrency is how many partitions are processed at once; records of
	// one partition are always processed one after another. URL parameter
	// "concurrency". Defaults to 16.
	Concurrency int
	// ClientID is the Kafka client id the broker sees. URL parameter
	// "client_id". Defaults to "outbox".
	ClientID string
	// DialTimeout bounds each connection attempt, and NewSubscriber's check
	// that a broker answers. URL parameter "dial_timeout". Defaults to 10s.
	DialTimeout time.Duration
	// Compression is the codec of records written to the dead-letter topic:
	// "none", "gzip", "snappy", "lz4" or "zstd". URL parameter
	// "compression". Defaults to "snappy".
	Compression string
	// TLS, when set, makes every connection use TLS with this config. URL
	// parameter "tls=true" sets a config with the system's roots. Defaults to
	// nil (plain TCP).
	TLS *tls.Config
	// MaxMessageBytes is the largest record batch written to the dead-letter
	// topic. URL parameter "max_message_bytes". Defaults to 1000012.
	MaxMessageBytes int
	// Timeout bounds one produce to the dead-letter topic and one offset
	// commit. URL parameter "timeout". Defaults to 30s.
	Timeout time.Duration
	// SessionTimeout is how long the group waits without a heartbeat before
	// it gives a member's partitions to the others: after a crash, the
	// crashed member's partitions, and their unacked messages, wait that long.
	// It must lie within the brokers' group.min.session.timeout.ms and
	// group.max.session.timeout.ms (6s and 30m by default). URL parameter
	// "session_timeout". Defaults to 45s.
	SessionTimeout time.Duration
	// RebalanceTimeout is how long a member may take to finish the records
	// in hand when the group rebalances: Run lets a rebalance happen only
	// between handler calls, so a handler that can run longer than this
	// (60s by default) gets its member removed from the group, and its
	// records are delivered again elsewhere. A record waiting for its next
	// delivery holds a poll for at most a quarter of it (at most 5s); a
	// longer wait pauses the record's partition instead. URL parameter
	// "rebalance_timeout". Defaults to 1m.
	RebalanceTimeout time.Duration
	// Logger receives handler failures, dead-lettered messages and failed
	// commits. Defaults to slog.Default().
	Logger *slog.Logger
	// ClientOpts are franz-go options of your own for the subscriber's
	// client: SASL mechanisms, a dialer, rack, metadata and fetch settings.
	// They apply after the options above and before the consumer group's,
	// so the group, its topics, manual commits, the start offset and the
	// session and rebalance timeouts stay the subscriber's. A group client
	// is fixed when it is made, which is why the subscriber takes options
	// instead of a *kgo.Client. Defaults to none.
	ClientOpts []kgo.Opt

	// dial replaces the dialer, for tests (export_test.go).
	dial func(ctx context.Context, network, host string) (net.Conn, error)
}

// newSubscriberConfig checks cfg and returns the connection and the
// Subscriber it describes, without a client yet.
func newSubscriberConfig(cfg SubscriberConfig) (*connection, *Subscriber, error) {
	c, err := parseURL(cfg.URL)
	if err != nil {
		return nil, nil, err
	}
	if err := c.common(cfg.ClientID, cfg.DialTimeout, cfg.Timeout, cfg.MaxMessageBytes, cfg.Compression, cfg.TLS, cfg.Logger); err != nil {
		return nil, nil, err
	}
	if err := cfg.redeliveryFromURL(c); err != nil {
		return nil, nil, err
	}
	policy := redelivery.Policy{
		MaxDeliveries: def(cfg.MaxDeliveries, DefaultMaxDeliveries), Delay: cfg.RedeliveryDelay,
		DelayMax: cfg.RedeliveryDelayMax, DeadLetterAfter: cfg.DeadLetterAfter,
	}.Defaults()
	if reason := policy.Check("RedeliveryDelay (redelivery_delay)", "RedeliveryDelayMax (redelivery_delay_max)"); reason != "" {
		return nil, nil, configError("%s", reason)
	}
	if err := c.q.Duration(&cfg.SessionTimeout, "session_timeout"); err != nil {
		return nil, nil, err
	}
	if err := c.q.Duration(&cfg.RebalanceTimeout, "rebalance_timeout"); err != nil {
		return nil, nil, err
	}
	c.dial = cfg.dial
	if err := cfg.check(); err != nil {
		return nil, nil, err
	}
	s := &Subscriber{
		conn:        c,
		clientOpts:  slices.Clone(cfg.ClientOpts),
		group:       cfg.Group,
		dlt:         map[string]string{},
		retries:     map[retryKey]*retryState{},
		session:     def(cfg.SessionTimeout, DefaultSessionTimeout),
		rebalance:   def(cfg.RebalanceTimeout, DefaultRebalanceTimeout),
		redelivery:  policy,
		backoff:     def(cfg.RetryBackoff, DefaultRetryBackoff),
		concurrency: def(cfg.Concurrency, DefaultConcurrency),
		log:         c.logger,
		stop:        make(chan struct{}),
		runDone:     make(chan struct{}),
	}
	if err := s.nameTopics(cfg); err != nil {
		return nil, nil, err
	}
	return c, s, nil
}

// redeliveryFromURL fills the topic, dead-letter and redelivery fields that
// the URL's query parameters set.
func (cfg *SubscriberConfig) redeliveryFromURL(c *connection) error {
	c.q.String(&cfg.Destination, "topic")
	c.q.String(&cfg.DeadLetterTopic, "dlt")
	if err := c.q.Int(&cfg.MaxDeliveries, "max_deliveries"); err != nil {
		return err
	}
	if err := c.q.Int(&cfg.Concurrency, "concurrency"); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
	}{
		{"retry_backoff", &cfg.RetryBackoff}, {"redelivery_delay", &cfg.RedeliveryDelay},
		{"redelivery_delay_max", &cfg.RedeliveryDelayMax}, {"dead_letter_after", &cfg.DeadLetterAfter},
	} {
		if err := c.q.Duration(d.v, d.name); err != nil {
			return err
		}
	}
	return nil
}

// check reports the first field that is missing or out of range.
func (cfg *SubscriberConfig) check() error {
	if err := checkTemplate("Destination", "topic", cfg.Destination); err != nil {
		return err
	}
	if err := checkTemplate("DeadLetterTopic", "dlt", cfg.DeadLetterTopic); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(cfg.Group) == "":
		return configError("SubscriberConfig.Group is empty; name the consumer group")
	case len(cfg.Topics) == 0:
		return configError("SubscriberConfig.Topics is empty; list the row topics to consume")
	case cfg.MaxDeliveries < 0:
		return configError("MaxDeliveries is %d; it must be positive (or 0 for %d)", cfg.MaxDeliveries, DefaultMaxDeliveries)
	case cfg.Concurrency < 0:
		return configError("Concurrency is %d; it must be positive (or 0 for %d)", cfg.Concurrency, DefaultConcurrency)
	case cfg.RetryBackoff < 0:
		return configError("RetryBackoff is %s; it must be positive (or 0 for %s)", cfg.RetryBackoff, DefaultRetryBackoff)
	case cfg.SessionTimeout < 0 || cfg.SessionTimeout > 0 && cfg.SessionTimeout < time.Second:
		return configError("SessionTimeout is %s; use 1s or more, within the brokers' group.min.session.timeout.ms and group.max.session.timeout.ms (or 0 for %s)", cfg.SessionTimeout, DefaultSessionTimeout)
	case cfg.RebalanceTimeout < 0 || cfg.RebalanceTimeout > 0 && cfg.RebalanceTimeout < time.Second:
		return configError("RebalanceTimeout is %s; use 1s or more (or 0 for %s)", cfg.RebalanceTimeout, DefaultRebalanceTimeout)
	}
	return nil
}

// nameTopics sets the Kafka topics that cfg.Topics name, and the
// dead-letter topic of each.
func (s *Subscriber) nameTopics(cfg SubscriberConfig) error {
	dest := template(def(cfg.Destination, DefaultDestination))
	dlt := template(def(cfg.DeadLetterTopic, DefaultDeadLetterTopic))
	for _, t := range cfg.Topics {
		kt := dest.render(t)
		if reason := validTopic(kt); reason != "" {
			return configError("topic %q becomes %q, which is not a valid Kafka topic name: %s", t, kt, reason)
		}
		if _, dup := s.dlt[kt]; dup {
			continue
		}
		d := dlt.render(kt)
		if d == kt {
			return configError("DeadLetterTopic %q makes the dead-letter topic of %q the topic itself", string(dlt), kt)
		}
		s.topics = append(s.topics, kt)
		s.dlt[kt] = d
	}
	return nil
}

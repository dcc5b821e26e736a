package outboxprom

import (
	"fmt"
	"regexp"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

// Opt configures a Metrics; see New.
type Opt interface{ apply(*cfg) }

type opt func(*cfg)

func (o opt) apply(c *cfg) { o(c) }

// DefaultBuckets are the histograms' buckets, in seconds: a batch takes a
// few milliseconds, a publish up to the relay's PublishTimeout (30s by
// default).
var DefaultBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// OtherTopic is the topic label of the messages of every topic past
// MaxTopics.
const OtherTopic = "_other"

type cfg struct {
	namespace       string
	buckets         []float64
	maxTopics       int
	backlog         outboxdriver.BacklogReader
	backlogInterval time.Duration
	backlogTimeout  time.Duration
}

func defaults() cfg {
	return cfg{
		namespace:       "outbox",
		buckets:         DefaultBuckets,
		maxTopics:       100,
		backlogInterval: 10 * time.Second,
		backlogTimeout:  5 * time.Second,
	}
}

var validName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

func (c cfg) validate() error {
	switch {
	case !validName.MatchString(c.namespace):
		return fmt.Errorf("outboxprom: namespace %q is not a metric name prefix (letters, digits and _, not starting with a digit)", c.namespace)
	case len(c.buckets) == 0:
		return fmt.Errorf("outboxprom: no histogram buckets")
	case c.maxTopics < 1:
		return fmt.Errorf("outboxprom: MaxTopics %d must be at least 1", c.maxTopics)
	case c.backlogInterval < 0:
		return fmt.Errorf("outboxprom: BacklogInterval %s must not be negative", c.backlogInterval)
	case c.backlogTimeout <= 0:
		return fmt.Errorf("outboxprom: BacklogTimeout %s must be positive", c.backlogTimeout)
	}
	for i := 1; i < len(c.buckets); i++ {
		if c.buckets[i] <= c.buckets[i-1] {
			return fmt.Errorf("outboxprom: histogram buckets %v must increase", c.buckets)
		}
	}
	return nil
}

// Namespace is the prefix of every metric name. Defaults to "outbox".
func Namespace(ns string) Opt { return opt(func(c *cfg) { c.namespace = ns }) }

// Buckets are the upper bounds, in seconds, of the batch and stage duration
// histograms, in increasing order. Defaults to DefaultBuckets.
func Buckets(b []float64) Opt {
	return opt(func(c *cfg) { c.buckets = append([]float64(nil), b...) })
}

// MaxTopics is how many topics get a topic label value of their own; the
// messages of every further topic are counted under OtherTopic. It bounds
// the relay's series at 4×MaxTopics. Defaults to 100.
func MaxTopics(n int) Opt { return opt(func(c *cfg) { c.maxTopics = n }) }

// Backlog makes each scrape also report the backlog that r reads (every
// outbox driver's store is one): pending and dead messages and the age of
// the oldest pending one. Defaults to none: without it the Metrics reports
// the relay's series only.
func Backlog(r outboxdriver.BacklogReader) Opt { return opt(func(c *cfg) { c.backlog = r }) }

// BacklogInterval is how long a backlog reading is served before a scrape
// reads it again, so that several scrapers (two Prometheus replicas) do not
// each query the database; 0 reads it on every scrape. Defaults to 10s.
func BacklogInterval(d time.Duration) Opt { return opt(func(c *cfg) { c.backlogInterval = d }) }

// BacklogTimeout bounds one backlog read, and how long a scrape waits for
// it: a read that takes longer is cancelled, and the scrape reports
// outbox_backlog_up 0 without the backlog's gauges. Keep it below the
// scrape timeout. Defaults to 5s.
func BacklogTimeout(d time.Duration) Opt { return opt(func(c *cfg) { c.backlogTimeout = d }) }

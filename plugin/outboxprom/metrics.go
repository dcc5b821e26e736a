package outboxprom

import (
	"context"
	"sync"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/redact"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what a relay does, as an outbox.BatchHook, and reports it
// with the outbox table's backlog, as a prometheus.Collector. Build it with
// New, register it on a prometheus.Registerer, and pass it to the relays in
// outbox.RelayConfig.Hooks. It is safe for concurrent use.
type Metrics struct {
	cfg cfg

	messages      *prometheus.CounterVec
	batches       prometheus.Counter
	outages       prometheus.Counter
	batchDuration prometheus.Histogram
	stageDuration *prometheus.HistogramVec
	claim         prometheus.Observer
	publish       prometheus.Observer
	mark          prometheus.Observer
	lastBatch     prometheus.Gauge

	// The cleaner's series (CleanupHook), exported once a cleaner reports.
	cleanupDeleted *prometheus.CounterVec
	cleanupRounds  *prometheus.CounterVec
	cleanupLastOK  *prometheus.GaugeVec

	// topics holds the counters of each topic seen, by outcome kind, so that
	// a batch resolves each of its topics' label values once.
	mu     sync.RWMutex
	topics map[string]*outcomeCounters
	other  *outcomeCounters // OtherTopic's, once topics is full

	backlog *backlog // nil without the Backlog option
}

// outcomeCounters are one topic's counters, indexed by outbox.OutcomeKind.
type outcomeCounters [4]prometheus.Counter

// outcomeNames are the outcome label values, indexed by outbox.OutcomeKind.
var outcomeNames = [4]string{
	outbox.OutcomeSent:    "sent",
	outbox.OutcomeRetry:   "retried",
	outbox.OutcomeDead:    "dead",
	outbox.OutcomeRelease: "released",
}

var (
	_ outbox.BatchHook     = (*Metrics)(nil)
	_ outbox.CleanupHook   = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// New returns a Metrics configured by opts; it fails on an invalid option.
func New(opts ...Opt) (*Metrics, error) {
	c := defaults()
	for _, o := range opts {
		o.apply(&c)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	m := &Metrics{
		cfg: c,
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: c.namespace, Subsystem: "relay", Name: "messages_total",
			Help: "Messages the relay handled, by topic and outcome: sent, retried (refused, to be retried), dead (refused for the last time) or released (left NEW: the broker was unreachable, or an earlier message of the key failed).",
		}, []string{"topic", "outcome"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: c.namespace, Subsystem: "relay", Name: "batches_total",
			Help: "Batches the relay finished (claimed, published and marked); empty claims are not counted.",
		}),
		outages: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: c.namespace, Subsystem: "relay", Name: "outage_batches_total",
			Help: "Batches the relay took for an outage of the broker (unreachable, or many messages refused alike): they spent no retries, and the relay paused and probed one message at a time. Growing while the broker is down.",
		}),
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: c.namespace, Subsystem: "relay", Name: "batch_duration_seconds",
			Help:    "Time from a batch's claim to its finished mark.",
			Buckets: c.buckets,
		}),
		stageDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: c.namespace, Subsystem: "relay", Name: "stage_duration_seconds",
			Help:    "Time a batch spent in each stage: claim (the database's claim), publish (the broker) and mark (recording the outcomes).",
			Buckets: c.buckets,
		}, []string{"stage"}),
		lastBatch: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: c.namespace, Subsystem: "relay", Name: "last_batch_timestamp_seconds",
			Help: "When the relay last finished a batch, in seconds since the Unix epoch.",
		}),
		cleanupDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: c.namespace, Subsystem: "cleanup", Name: "deleted_rows_total",
			Help: "Rows an outbox.Cleaner deleted: rows is sent (SENT messages of the outbox table) or consumed (records of the inbox table).",
		}, []string{"rows"}),
		cleanupRounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: c.namespace, Subsystem: "cleanup", Name: "rounds_total",
			Help: "Rounds an outbox.Cleaner ran, by result: ok or failed.",
		}, []string{"result"}),
		cleanupLastOK: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: c.namespace, Subsystem: "cleanup", Name: "last_success_timestamp_seconds",
			Help: "When an outbox.Cleaner last finished a round without an error, in seconds since the Unix epoch.",
		}, nil),
		topics: map[string]*outcomeCounters{},
	}
	m.claim = m.stageDuration.WithLabelValues("claim")
	m.publish = m.stageDuration.WithLabelValues("publish")
	m.mark = m.stageDuration.WithLabelValues("mark")
	if c.backlog != nil {
		m.backlog = newBacklog(c)
	}
	return m, nil
}

// tally is one topic's counts in one batch.
type tally struct {
	topic string
	n     [4]int
}

// smallTallies is how many topics of a batch are tallied with a linear
// search; a batch with more switches to a map.
const smallTallies = 16

// OnBatch implements outbox.BatchHook. It tallies the batch's outcomes per
// topic, then adds each topic's tally to its counters: the per-message work
// is a string comparison, and label values are resolved once per topic and
// batch, not per message.
func (m *Metrics) OnBatch(_ context.Context, rep outbox.BatchReport) {
	var buf [smallTallies]tally
	tallies := buf[:0]
	var index map[string]int // when a batch has more than smallTallies topics
	cur := -1
	for i := range rep.Results {
		r := &rep.Results[i]
		k := r.Outcome.Kind
		if int(k) >= len(outcomeNames) {
			continue
		}
		topic := r.Message.Topic
		if cur < 0 || tallies[cur].topic != topic {
			cur = findTally(tallies, index, topic)
			if cur < 0 {
				tallies = append(tallies, tally{topic: topic})
				cur = len(tallies) - 1
				if index != nil {
					index[topic] = cur
				} else if len(tallies) > smallTallies {
					index = make(map[string]int, 2*len(tallies))
					for j, t := range tallies {
						index[t.topic] = j
					}
				}
			}
		}
		tallies[cur].n[k]++
	}
	for i := range tallies {
		c := m.counters(tallies[i].topic)
		for k, n := range tallies[i].n {
			if n > 0 {
				c[k].Add(float64(n))
			}
		}
	}
	m.batches.Inc()
	if rep.Outage != nil {
		m.outages.Inc()
	}
	m.batchDuration.Observe(rep.Duration.Seconds())
	m.claim.Observe(rep.ClaimDuration.Seconds())
	m.publish.Observe(rep.PublishDuration.Seconds())
	m.mark.Observe(rep.MarkDuration.Seconds())
	m.lastBatch.SetToCurrentTime()
}

// findTally returns the index of topic's tally, or -1.
func findTally(tallies []tally, index map[string]int, topic string) int {
	if index != nil {
		if i, ok := index[topic]; ok {
			return i
		}
		return -1
	}
	for i := range tallies {
		if tallies[i].topic == topic {
			return i
		}
	}
	return -1
}

// counters returns topic's counters, creating them (at 0, for every
// outcome, so that rate() sees each series from its start) the first time,
// or OtherTopic's once MaxTopics topics have their own.
func (m *Metrics) counters(topic string) *outcomeCounters {
	m.mu.RLock()
	c, full, other := m.topics[topic], len(m.topics) >= m.cfg.maxTopics, m.other
	m.mu.RUnlock()
	switch {
	case c != nil:
		return c
	case full && other != nil:
		return other
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.topics[topic]; c != nil {
		return c
	}
	if len(m.topics) < m.cfg.maxTopics {
		c = m.newCounters(topic)
		m.topics[topic] = c
		return c
	}
	if m.other == nil {
		m.other = m.newCounters(OtherTopic)
	}
	return m.other
}

// newCounters returns the counters of topic, whose label value is topic
// with the credentials of any URL in it masked (internal/redact): the
// labels are fixed names but the topic, which the application chooses, and
// a scrape must not serve a secret. Two topics that differ only in a
// credential share their series.
func (m *Metrics) newCounters(topic string) *outcomeCounters {
	label := redact.Text(topic)
	c := new(outcomeCounters)
	for k, name := range outcomeNames {
		c[k] = m.messages.WithLabelValues(label, name)
	}
	return c
}

// OnCleanup implements outbox.CleanupHook: pass the Metrics to a Cleaner in
// outbox.CleanerConfig.Hooks too, and it counts the cleaner's rounds and
// the rows they deleted.
func (m *Metrics) OnCleanup(_ context.Context, rep outbox.CleanerReport, err error) {
	m.cleanupDeleted.WithLabelValues("sent").Add(float64(rep.Sent))
	m.cleanupDeleted.WithLabelValues("consumed").Add(float64(rep.Consumed))
	if err != nil {
		m.cleanupRounds.WithLabelValues("ok")
		m.cleanupRounds.WithLabelValues("failed").Inc()
		return
	}
	m.cleanupRounds.WithLabelValues("failed")
	m.cleanupRounds.WithLabelValues("ok").Inc()
	m.cleanupLastOK.WithLabelValues().SetToCurrentTime()
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.own() {
		c.Describe(ch)
	}
	if m.backlog != nil {
		m.backlog.describe(ch)
	}
}

// Collect implements prometheus.Collector. With the Backlog option it reads
// the backlog (see BacklogInterval and BacklogTimeout) and so may wait for
// the database up to BacklogTimeout.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.own() {
		c.Collect(ch)
	}
	if m.backlog != nil {
		m.backlog.collect(ch)
	}
}

// own lists the series the hooks count, which Describe and Collect pass on.
func (m *Metrics) own() []prometheus.Collector {
	return []prometheus.Collector{m.messages, m.batches, m.outages, m.batchDuration, m.stageDuration, m.lastBatch,
		m.cleanupDeleted, m.cleanupRounds, m.cleanupLastOK}
}

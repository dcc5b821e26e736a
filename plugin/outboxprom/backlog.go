package outboxprom

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
	"github.com/prometheus/client_golang/prometheus"
)

// backlog reads the outbox table's backlog for a scrape: at most one read is
// in flight, a reading is served for BacklogInterval, and a scrape waits for
// a read at most BacklogTimeout.
type backlog struct {
	reader   outboxdriver.BacklogReader
	interval time.Duration
	timeout  time.Duration

	pending, oldest, dead, up, took *prometheus.Desc
	failures                        prometheus.Counter

	mu       sync.Mutex
	last     reading
	inflight chan struct{} // closed when the read in flight ends; nil when none
}

// reading is the outcome of one backlog read.
type reading struct {
	b    outboxdriver.Backlog
	err  error
	took time.Duration
	at   time.Time // when the read ended; zero before the first
}

func newBacklog(c cfg) *backlog {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(c.namespace, "", name), help, nil, nil)
	}
	return &backlog{
		reader: c.backlog, interval: c.backlogInterval, timeout: c.backlogTimeout,
		pending: desc("pending_messages", "NEW messages in the outbox table, due or waiting for a retry."),
		oldest:  desc("pending_oldest_age_seconds", "Age of the oldest NEW message in the outbox table (0 when none): how far the relay is behind."),
		dead:    desc("dead_messages", "DEAD messages in the outbox table, waiting for an operator (reported where the store counts them through an index: every SQL dialect at its latest schema)."),
		up:      desc("backlog_up", "1 when the last read of the outbox table's backlog succeeded, 0 when it failed or timed out."),
		took:    desc("backlog_read_duration_seconds", "How long the last read of the outbox table's backlog took."),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: c.namespace, Name: "backlog_read_failures_total",
			Help: "Reads of the outbox table's backlog that failed or timed out.",
		}),
	}
}

func (b *backlog) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{b.pending, b.oldest, b.dead, b.up, b.took} {
		ch <- d
	}
	b.failures.Describe(ch)
}

func (b *backlog) collect(ch chan<- prometheus.Metric) {
	r := b.current()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	if r.err != nil {
		gauge(b.up, 0)
	} else {
		gauge(b.up, 1)
		gauge(b.pending, float64(r.b.Pending))
		gauge(b.oldest, r.b.OldestPendingAge.Seconds())
		if r.b.DeadCounted {
			gauge(b.dead, float64(r.b.Dead))
		}
	}
	gauge(b.took, r.took.Seconds())
	b.failures.Collect(ch)
}

// current returns the last reading if it is fresh, else starts a read (or
// joins the one in flight) and waits for it up to the timeout.
func (b *backlog) current() reading {
	b.mu.Lock()
	if b.inflight == nil && (b.last.at.IsZero() || time.Since(b.last.at) >= b.interval) {
		b.inflight = make(chan struct{})
		go b.read(b.inflight)
	}
	done, last := b.inflight, b.last
	b.mu.Unlock()
	if done == nil {
		return last
	}
	t := time.NewTimer(b.timeout)
	defer t.Stop()
	select {
	case <-done:
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.last
	case <-t.C:
		// The read's own context ends at the same time; a store that does
		// not heed it keeps this read in flight, and later scrapes wait for
		// it instead of starting another.
		return reading{err: fmt.Errorf("outboxprom: backlog read took longer than %s", b.timeout), took: b.timeout}
	}
}

// read reads the backlog, records the reading and closes done.
func (b *backlog) read(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	start := time.Now()
	bl, err := b.reader.Backlog(ctx)
	r := reading{b: bl, err: err, took: time.Since(start), at: time.Now()}
	if err != nil {
		b.failures.Inc()
	}
	b.mu.Lock()
	b.last, b.inflight = r, nil
	b.mu.Unlock()
	close(done)
}

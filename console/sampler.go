package console

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// maxTopics bounds the topics one sample keeps; the rest are summed.
const maxTopics = 50

// sample is the backlog at one moment.
type sample struct {
	at      time.Time
	ok      bool // false: the database did not answer
	pending int64
	oldest  time.Duration
	dead    int64
	maxID   int64
	hooked  bool  // the relays of this process report to the console
	sent    int64 // sent by those relays so far
	killed  int64 // made DEAD by those relays so far
	topics  map[string]topicSample
}

type topicSample struct {
	outboxdriver.TopicBacklog
	sent, killed int64
}

// ring holds the last samples.
type ring struct {
	mu   sync.Mutex
	buf  []sample
	next int
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]sample, n)} }

func (r *ring) add(s sample) {
	r.mu.Lock()
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	r.full = r.full || r.next == 0
	r.mu.Unlock()
}

// all returns the samples, oldest first.
func (r *ring) all() []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]sample(nil), r.buf[:r.next]...)
	}
	return append(append([]sample(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}

// counts are what the relays of this process sent and killed, per topic.
type counts struct {
	mu     sync.Mutex
	hooked bool
	sent   map[string]int64
	killed map[string]int64
}

func newCounts() *counts { return &counts{sent: map[string]int64{}, killed: map[string]int64{}} }

// OnBatch implements outbox.BatchHook: it counts the batch's SENT and DEAD
// messages per topic.
func (c *Console) OnBatch(_ context.Context, rep outbox.BatchReport) {
	k := c.counts
	k.mu.Lock()
	defer k.mu.Unlock()
	k.hooked = true
	for _, res := range rep.Results {
		switch res.Outcome.Kind {
		case outbox.OutcomeSent:
			k.sent[res.Message.Topic]++
		case outbox.OutcomeDead:
			k.killed[res.Message.Topic]++
		}
	}
}

// Run samples the backlog every Config.SampleEvery until ctx ends, for
// the backlog's chart. It returns nil when ctx ends.
func (c *Console) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.SampleEvery)
	defer t.Stop()
	var warned time.Time
	for {
		if err := c.sampleOnce(ctx); err != nil && ctx.Err() == nil && time.Since(warned) > time.Minute {
			warned = time.Now()
			c.cfg.Logger.Warn("outbox console: cannot sample the backlog", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (c *Console) sampleOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	s := sample{at: time.Now(), topics: map[string]topicSample{}}
	if !c.turn(ctx) {
		return ctx.Err()
	}
	topics, maxID, err := c.backlog.TopicBacklog(ctx)
	<-c.turns
	if err != nil {
		c.ring.add(s)
		return err
	}
	s.ok, s.maxID = true, maxID
	c.counts.mu.Lock()
	s.hooked = c.counts.hooked
	for _, t := range topics {
		s.pending += t.Pending
		s.dead += t.Dead
		s.oldest = max(s.oldest, t.OldestPendingAge)
		if len(s.topics) < maxTopics {
			s.topics[t.Topic] = topicSample{TopicBacklog: t, sent: c.counts.sent[t.Topic], killed: c.counts.killed[t.Topic]}
		}
	}
	for topic, n := range c.counts.sent {
		s.sent += n
		if _, ok := s.topics[topic]; !ok && len(s.topics) < maxTopics {
			s.topics[topic] = topicSample{TopicBacklog: outboxdriver.TopicBacklog{Topic: topic}, sent: n, killed: c.counts.killed[topic]}
		}
	}
	for _, n := range c.counts.killed {
		s.killed += n
	}
	c.counts.mu.Unlock()
	c.ring.add(s)
	return nil
}

// point is one sample as GET /api/backlog serves it. A rate is absent
// where it cannot be known: the first sample, a gap, or (per topic) a
// console whose process runs no relay.
type point struct {
	At         time.Time `json:"t"`
	Pending    *int64    `json:"pending"`
	OldestSecs *float64  `json:"oldest_seconds"`
	Dead       *int64    `json:"dead"`
	SentRate   *float64  `json:"sent_per_second"`
	DeadRate   *float64  `json:"dead_per_second"`
}

type topicSeries struct {
	Topic  string  `json:"topic"`
	Now    point   `json:"now"`
	Series []point `json:"series"`
}

// backlogAnswer is what GET /api/backlog serves.
type backlogAnswer struct {
	EverySeconds float64       `json:"every_seconds"`
	Rates        string        `json:"rates"` // "relay" or "estimate"
	Now          *point        `json:"now"`
	Series       []point       `json:"series"`
	Topics       []topicSeries `json:"topics"`
}

func (c *Console) serveBacklog(w http.ResponseWriter, _ *http.Request, _ who) {
	reply(w, http.StatusOK, c.backlogOf(c.ring.all()))
}

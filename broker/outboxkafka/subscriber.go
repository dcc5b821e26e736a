package outboxkafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox"
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

	// dial replaces the dialer, for tests (export_test.go).
	dial func(ctx context.Context, network, host string) (net.Conn, error)
}

// Subscriber consumes the destination topics of Topics in a consumer group
// and hands each message to a handler; see Run.
type Subscriber struct {
	cl          *kgo.Client
	conn        *connection
	group       string
	topics      []string // Kafka topics consumed
	dlt         map[string]string
	redelivery  redelivery.Policy
	session     time.Duration // the group's session timeout
	rebalance   time.Duration // the group's rebalance timeout
	backoff     time.Duration
	concurrency int
	log         *slog.Logger

	retryMu sync.Mutex
	retries map[retryKey]*retryState // of records whose handler failed

	mu      sync.Mutex
	running bool
	ran     bool
	stop    chan struct{} // closed by Close
	runDone chan struct{} // closed when Run returns
	once    sync.Once
}

// NewSubscriber checks cfg, connects, and creates the dead-letter topics that
// do not exist yet. A new group starts at the earliest retained offset of
// each partition, so every message published after NewSubscriber returns (and
// any still retained from before) reaches the group, whenever Run starts.
// Brokers that do not answer within DialTimeout fail it with an error that
// satisfies outbox.IsUnavailable; refused credentials with one that wraps
// ErrRefusedLogin.
func NewSubscriber(ctx context.Context, cfg SubscriberConfig) (*Subscriber, error) {
	c, s, err := newSubscriberConfig(cfg)
	if err != nil {
		return nil, err
	}
	state := &connState{}
	s.cl, err = c.newClient(ctx, state,
		kgo.ConsumerGroup(s.group),
		kgo.ConsumeTopics(s.topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(s.session),
		kgo.RebalanceTimeout(s.rebalance),
		// Kafka's advice: heartbeats at most a third of the session apart.
		kgo.HeartbeatInterval(min(3*time.Second, s.session/3)),
		// Partitions are not revoked while a poll's records are processed:
		// Run commits what it finished and then allows the rebalance, so a
		// partition's next owner starts right after the last handled record.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			if len(lost) == 0 {
				return // a member that never got partitions (it failed to join)
			}
			s.log.Warn("outboxkafka: partitions lost without a chance to commit; their uncommitted records will be delivered again",
				"group", s.group, "partitions", lost)
		}),
	)
	if err != nil {
		return nil, err
	}
	if err := s.ensureDeadLetterTopics(ctx); err != nil {
		s.cl.Close()
		return nil, err
	}
	return s, nil
}

func newSubscriberConfig(cfg SubscriberConfig) (*connection, *Subscriber, error) {
	c, err := parseURL(cfg.URL)
	if err != nil {
		return nil, nil, err
	}
	if err := c.common(cfg.ClientID, cfg.DialTimeout, cfg.Timeout, cfg.MaxMessageBytes, cfg.Compression, cfg.TLS, cfg.Logger); err != nil {
		return nil, nil, err
	}
	c.q.String(&cfg.Destination, "topic")
	c.q.String(&cfg.DeadLetterTopic, "dlt")
	if err := c.q.Int(&cfg.MaxDeliveries, "max_deliveries"); err != nil {
		return nil, nil, err
	}
	if err := c.q.Int(&cfg.Concurrency, "concurrency"); err != nil {
		return nil, nil, err
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
	}{
		{"retry_backoff", &cfg.RetryBackoff}, {"redelivery_delay", &cfg.RedeliveryDelay},
		{"redelivery_delay_max", &cfg.RedeliveryDelayMax}, {"dead_letter_after", &cfg.DeadLetterAfter},
	} {
		if err := c.q.Duration(d.v, d.name); err != nil {
			return nil, nil, err
		}
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
	if err := checkTemplate("Destination", "topic", cfg.Destination); err != nil {
		return nil, nil, err
	}
	if err := checkTemplate("DeadLetterTopic", "dlt", cfg.DeadLetterTopic); err != nil {
		return nil, nil, err
	}
	switch {
	case strings.TrimSpace(cfg.Group) == "":
		return nil, nil, configError("SubscriberConfig.Group is empty; name the consumer group")
	case len(cfg.Topics) == 0:
		return nil, nil, configError("SubscriberConfig.Topics is empty; list the row topics to consume")
	case cfg.MaxDeliveries < 0:
		return nil, nil, configError("MaxDeliveries is %d; it must be positive (or 0 for %d)", cfg.MaxDeliveries, DefaultMaxDeliveries)
	case cfg.Concurrency < 0:
		return nil, nil, configError("Concurrency is %d; it must be positive (or 0 for %d)", cfg.Concurrency, DefaultConcurrency)
	case cfg.RetryBackoff < 0:
		return nil, nil, configError("RetryBackoff is %s; it must be positive (or 0 for %s)", cfg.RetryBackoff, DefaultRetryBackoff)
	case cfg.SessionTimeout < 0 || cfg.SessionTimeout > 0 && cfg.SessionTimeout < time.Second:
		return nil, nil, configError("SessionTimeout is %s; use 1s or more, within the brokers' group.min.session.timeout.ms and group.max.session.timeout.ms (or 0 for %s)", cfg.SessionTimeout, DefaultSessionTimeout)
	case cfg.RebalanceTimeout < 0 || cfg.RebalanceTimeout > 0 && cfg.RebalanceTimeout < time.Second:
		return nil, nil, configError("RebalanceTimeout is %s; use 1s or more (or 0 for %s)", cfg.RebalanceTimeout, DefaultRebalanceTimeout)
	}
	dest := template(def(cfg.Destination, DefaultDestination))
	dlt := template(def(cfg.DeadLetterTopic, DefaultDeadLetterTopic))
	s := &Subscriber{
		conn:        c,
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
	for _, t := range cfg.Topics {
		kt := dest.render(t)
		if reason := validTopic(kt); reason != "" {
			return nil, nil, configError("topic %q becomes %q, which is not a valid Kafka topic name: %s", t, kt, reason)
		}
		if _, dup := s.dlt[kt]; dup {
			continue
		}
		d := dlt.render(kt)
		if d == kt {
			return nil, nil, configError("DeadLetterTopic %q makes the dead-letter topic of %q the topic itself", string(dlt), kt)
		}
		s.topics = append(s.topics, kt)
		s.dlt[kt] = d
	}
	return c, s, nil
}

// ensureDeadLetterTopics creates the dead-letter topics that do not exist,
// with retention.ms -1 (kept until deleted).
func (s *Subscriber) ensureDeadLetterTopics(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.conn.timeout)
	defer cancel()
	adm := kadm.NewClient(s.cl)
	seen := map[string]bool{}
	var names []string
	for _, d := range s.dlt {
		if !seen[d] {
			seen[d] = true
			names = append(names, d)
		}
	}
	// A dead letter waits for a person: kept until deleted, not for the
	// broker's default retention (7 days).
	forever := "-1"
	resp, err := adm.CreateTopics(ctx, -1, -1, map[string]*string{"retention.ms": &forever}, names...)
	if err != nil {
		return s.brokerError(fmt.Errorf("outboxkafka: creating the dead-letter topics %v: %w", names, err))
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("outboxkafka: cannot create dead-letter topic %q (create it yourself, or choose another with DeadLetterTopic / ?dlt=): %w", r.Topic, r.Err)
		}
	}
	return nil
}

func (s *Subscriber) brokerError(err error) error {
	if isConnectionError(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return outbox.Unavailable(err)
	}
	return err
}

// Run consumes until ctx ends or Close is called, and then returns nil after
// the handler calls in hand have finished and their offsets are committed.
//
// Records of one partition are handled one after another, in offset order,
// so that messages with the same key are handled in publish order; up to
// Concurrency partitions are handled at once. A record's offset is committed
// only after h returned nil for it, or after it was produced (and acked) to
// the dead-letter topic. When h fails, the record is handed to h again after
// RedeliveryDelay (doubling, up to RedeliveryDelayMax), and later records of
// its partition wait (a long wait pauses the partition at the record, so
// that polls and rebalances go on); it goes to the dead-letter topic at a failure that is
// at least the MaxDeliveries-th once it has been failing for
// DeadLetterAfter. A failure wrapped with outbox.Permanent, or a record that
// is not an outbox event, goes there at once. A failure for which
// outbox.IsUnavailable holds (the handler's database is down) is an outage:
// the partition pauses with the same growing delay and the record is handed
// to h again, without counting toward MaxDeliveries. A dead-letter copy too
// large for MaxMessageBytes or the dead-letter topic loses dead-letter
// headers until it fits (see deadLetterCopies); a record the dead-letter
// topic refuses even as it came holds its partition, logged at Error once a
// minute, until the topic accepts it.
//
// The handler runs with a context that is not canceled when ctx ends, so
// that the call in hand can finish and be committed. Run returns an error
// only when it cannot go on: the broker refuses this client the group or a
// topic (authorization), the client was closed under it, or Run was called
// twice.
// Run may be called only once; the subscriber is closed when it returns.
func (s *Subscriber) Run(ctx context.Context, h outbox.Handler) error {
	s.mu.Lock()
	if s.ran {
		s.mu.Unlock()
		return errors.New("outboxkafka: Subscriber.Run called twice; make a new Subscriber")
	}
	s.ran, s.running = true, true
	s.mu.Unlock()
	defer close(s.runDone)
	defer s.closeClient()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()

	for ctx.Err() == nil {
		// A poll ends in time to resume the partitions of records whose
		// next delivery is due.
		pctx, pcancel := context.WithCancel(ctx)
		if next, ok := s.resumeDue(); ok {
			pctx, pcancel = context.WithDeadline(ctx, next)
		}
		fetches := s.cl.PollRecords(pctx, 1000)
		pcancel()
		if fetches.IsClientClosed() {
			return errors.New("outboxkafka: the subscriber's client was closed while Run was running")
		}
		var fatal error
		failed := false
		fetches.EachError(func(topic string, p int32, err error) {
			switch {
			case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			case fatalConsumeError(err):
				switch {
				case fatal != nil:
				case errors.Is(err, kerr.InvalidSessionTimeout):
					fatal = fmt.Errorf("outboxkafka: group %q cannot be joined with SessionTimeout %s (URL parameter session_timeout); use a value the brokers allow: %w", s.group, s.session, err)
				case topic == "":
					fatal = fmt.Errorf("outboxkafka: group %q cannot consume: %w", s.group, err)
				default:
					fatal = fmt.Errorf("outboxkafka: group %q cannot consume topic %q: %w", s.group, topic, err)
				}
			default:
				failed = true
				s.log.Warn("outboxkafka: fetch failed; retrying", "group", s.group, "topic", topic, "partition", p, "err", err)
			}
		})
		done, later := s.process(ctx, fetches, h)
		s.commit(ctx, done)
		s.pauseUntilDue(later)
		s.cl.AllowRebalance()
		if fatal != nil {
			return fatal
		}
		if failed && fetches.NumRecords() == 0 {
			sleep(ctx, s.backoff) // do not spin on a failing fetch
		}
	}
	return nil
}

// fatalConsumeError reports errors that no retry cures: the broker refuses
// this client the group or the topic. Run returns them.
func fatalConsumeError(err error) bool {
	return errors.Is(err, kerr.GroupAuthorizationFailed) || errors.Is(err, kerr.TopicAuthorizationFailed) ||
		errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.InvalidGroupID) ||
		// SessionTimeout outside the brokers' group.min/max.session.timeout.ms:
		// the member can never join.
		errors.Is(err, kerr.InvalidSessionTimeout)
}

// process handles the records of one poll, partitions in parallel, and
// returns the last record done of each partition, and the records whose
// next delivery is due in a later poll (see deliver).
func (s *Subscriber) process(ctx context.Context, fetches kgo.Fetches, h outbox.Handler) (done, later []*kgo.Record) {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, s.concurrency)
	)
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var last *kgo.Record
			for _, r := range p.Records {
				if ctx.Err() != nil {
					break
				}
				ok, again := s.deliver(ctx, r, h)
				if again {
					mu.Lock()
					later = append(later, r)
					mu.Unlock()
				}
				if !ok {
					break
				}
				last = r
			}
			if last != nil {
				mu.Lock()
				done = append(done, last)
				mu.Unlock()
			}
		}()
	})
	wg.Wait()
	return done, later
}

// retryKey names the partition of a record whose handler failed.
type retryKey struct {
	topic     string
	partition int32
}

// retryState is the redelivery of a record whose handler failed, kept
// across polls.
type retryState struct {
	offset     int64
	deliveries int       // failed deliveries counted
	outages    int       // failures in a row that were outages
	first      time.Time // of the first counted failure
	next       time.Time // when the handler may have the record again
	paused     bool      // its partition is paused until next
}

// retryOf returns the redelivery state of rec and whether it is kept, or a
// new state, not kept yet.
func (s *Subscriber) retryOf(rec *kgo.Record) (st *retryState, kept bool) {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	st = s.retries[retryKey{rec.Topic, rec.Partition}]
	if st == nil || st.offset != rec.Offset {
		return &retryState{offset: rec.Offset}, false
	}
	return st, true
}

// keepRetry keeps st, the redelivery state of rec, across polls.
func (s *Subscriber) keepRetry(rec *kgo.Record, st *retryState) {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	s.retries[retryKey{rec.Topic, rec.Partition}] = st
}

// forgetRetry drops the redelivery state of rec, which is done.
func (s *Subscriber) forgetRetry(rec *kgo.Record) {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	delete(s.retries, retryKey{rec.Topic, rec.Partition})
}

// pauseUntilDue sets the partitions of recs back to them and pauses them
// until their next delivery is due. It runs in Run's goroutine before
// AllowRebalance, as SetOffsets asks.
func (s *Subscriber) pauseUntilDue(recs []*kgo.Record) {
	if len(recs) == 0 {
		return
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	pause := map[string][]int32{}
	s.retryMu.Lock()
	for _, r := range recs {
		if offsets[r.Topic] == nil {
			offsets[r.Topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
		pause[r.Topic] = append(pause[r.Topic], r.Partition)
		if st := s.retries[retryKey{r.Topic, r.Partition}]; st != nil {
			st.paused = true
		}
	}
	s.retryMu.Unlock()
	s.cl.PauseFetchPartitions(pause)
	s.cl.SetOffsets(offsets)
}

// resumeDue resumes the paused partitions whose record is due, and returns
// the earliest time another is.
func (s *Subscriber) resumeDue() (next time.Time, ok bool) {
	now := time.Now()
	resume := map[string][]int32{}
	s.retryMu.Lock()
	for k, st := range s.retries {
		switch {
		case !st.paused:
		case !st.next.After(now):
			st.paused = false
			resume[k.topic] = append(resume[k.topic], k.partition)
		case !ok || st.next.Before(next):
			next, ok = st.next, true
		}
	}
	s.retryMu.Unlock()
	if len(resume) > 0 {
		s.cl.ResumeFetchPartitions(resume)
	}
	return next, ok
}

// deliver hands rec to h until it succeeds or goes to the dead-letter
// topic, and reports whether rec is done (may be committed). A failed
// record is handed to h again after the redelivery policy's delay, and the
// later records of its partition wait. A short wait is slept in place; a
// longer one, which would keep the poll (and a rebalance of the group)
// waiting, ends deliver with again: Run pauses the partition at rec until
// the delay has passed, and a later poll hands rec to deliver again. deliver
// also reports false, without again, when ctx ends between deliveries.
func (s *Subscriber) deliver(ctx context.Context, rec *kgo.Record, h outbox.Handler) (ok, again bool) {
	m, err := decodeRecord(rec)
	if err != nil {
		return s.deadLetter(ctx, rec, err, 0), false
	}
	hctx := context.WithoutCancel(ctx)
	p := s.redelivery
	st, kept := s.retryOf(rec)
	forget := func() {
		if kept {
			s.forgetRetry(rec)
		}
	}
	// How long this call may hold the poll.
	hold := time.Now().Add(min(s.rebalance/4, maxPollHold))
	for {
		if wait := time.Until(st.next); wait > 0 {
			if time.Now().Add(wait).After(hold) {
				return false, true
			}
			if !sleep(ctx, wait) {
				return false, false
			}
		}
		err := h(hctx, m)
		switch {
		case err == nil:
			forget()
			return true, false
		case outbox.IsPermanent(err):
			forget()
			return s.deadLetter(ctx, rec, err, st.deliveries+1), false
		}
		if !kept {
			s.keepRetry(rec, st)
			kept = true
		}
		var d time.Duration
		msg := "outboxkafka: handler failed; delivering again"
		if outbox.IsUnavailable(err) {
			st.outages++
			d = p.Backoff(st.outages)
			msg = "outboxkafka: handler reports an outage; pausing the partition, the delivery is not counted"
		} else {
			st.outages = 0
			st.deliveries++
			if st.first.IsZero() {
				st.first = time.Now()
			}
			if p.Exhausted(st.deliveries, time.Since(st.first)) {
				forget()
				return s.deadLetter(ctx, rec, err, st.deliveries), false
			}
			d = p.Backoff(st.deliveries)
		}
		st.next = time.Now().Add(d)
		s.log.Info(msg, "group", s.group, "msg_id", m.MsgID, "topic", rec.Topic, "partition", rec.Partition,
			"offset", rec.Offset, "deliveries", st.deliveries, "retry_in", d, "err", err)
	}
}

// maxPollHold bounds how long deliver sleeps in place before it pauses the
// partition instead.
const maxPollHold = 5 * time.Second

// deadLetterLogEvery is how often a dead-letter produce that keeps failing
// is logged again; the first failure is logged at once.
const deadLetterLogEvery = time.Minute

// deadLetter produces r to its dead-letter topic and waits for the ack,
// trying again while ctx lasts. It reports whether r is done.
//
// A copy the producer or the topic refuses as too large is replaced by the
// next smaller one of deadLetterCopies. When even r as it came is refused,
// or the topic refuses the record for another reason, r is not acked (that
// would lose it): its partition waits, the refusal is logged at Error once a
// minute with what to change, and the produce is tried again until it
// succeeds or ctx ends.
func (s *Subscriber) deadLetter(ctx context.Context, r *kgo.Record, cause error, deliveries int) bool {
	topic := s.dlt[r.Topic]
	copies := deadLetterCopies(r, topic, s.group, cause, deliveries, s.conn.maxBytes)
	backoff := s.backoff
	var (
		failures int
		first    time.Time
		logged   time.Time
	)
	for i := 0; ; {
		dl := copies[i]
		// Each attempt produces a record of its own: franz-go keeps the
		// context of the first produce in the record, and a retry of the
		// same record would fail at once with that context canceled.
		rec := *dl.rec
		// The produce in hand may finish after ctx ends, like a handler call.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.conn.timeout)
		err := s.cl.ProduceSync(pctx, &rec).FirstErr()
		cancel()
		if err == nil {
			attrs := []any{"group", s.group, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
				"dead_letter_topic", topic, "deliveries", deliveries, "err", cause}
			if dl.note != "" {
				attrs = append(attrs, "copy", dl.note)
			}
			s.log.Warn("outboxkafka: message moved to the dead-letter topic", attrs...)
			return true
		}
		if errors.Is(err, kerr.MessageTooLarge) && i < len(copies)-1 {
			s.log.Debug("outboxkafka: the dead-letter copy is too large; trying a smaller one", "group", s.group,
				"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "dead_letter_topic", topic, "err", err)
			i++
			continue
		}
		failures++
		if failures == 1 {
			first = time.Now()
		}
		if time.Since(logged) >= deadLetterLogEvery {
			logged = time.Now()
			s.logDeadLetterFailure(r, dl.rec, err, failures, first)
		}
		if !sleep(ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, 20*s.backoff)
		// The topic's settings may have changed meanwhile: start again
		// from the most informative copy that fits MaxMessageBytes.
		i = 0
	}
}

// logDeadLetterFailure says why r cannot be moved to the dead-letter topic
// yet, and what to change when retrying will not help.
func (s *Subscriber) logDeadLetterFailure(r, dl *kgo.Record, err error, failures int, since time.Time) {
	attrs := []any{"group", s.group, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
		"dead_letter_topic", dl.Topic, "attempts", failures, "waiting_since", since.Format(time.RFC3339), "err", err}
	classified := classify(err, dl.Topic, nil)
	switch {
	case errors.Is(err, kerr.MessageTooLarge):
		n := recordBytes(dl)
		s.log.Error(fmt.Sprintf("outboxkafka: the dead-letter topic refuses the record as too large even without the dead-letter headers (%d bytes); "+
			"raise the dead-letter topic's max.message.bytes (and the subscriber's MaxMessageBytes, now %d, URL parameter max_message_bytes) to at least %d. "+
			"The record is not committed: its partition waits and the produce is tried again", n, s.conn.maxBytes, n),
			attrs...)
	case outbox.IsUnavailable(classified):
		s.log.Error("outboxkafka: producing to the dead-letter topic failed; its partition waits and the produce is tried again", attrs...)
	default:
		s.log.Error("outboxkafka: the broker refuses the record on the dead-letter topic (check that the topic exists, that this client may write to it, and that its settings accept the record); "+
			"the record is not committed: its partition waits and the produce is tried again", attrs...)
	}
}

// commit commits the offsets after done. A failed commit is logged: those
// records are delivered again to whoever consumes the partition next, and a
// later commit of the same partition covers them.
func (s *Subscriber) commit(ctx context.Context, done []*kgo.Record) {
	if len(done) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.conn.timeout)
	defer cancel()
	if err := s.cl.CommitRecords(cctx, done...); err != nil {
		s.log.Warn("outboxkafka: committing offsets failed; the records since the last commit will be delivered again",
			"group", s.group, "err", err)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// closeClient leaves the group and closes the connections.
func (s *Subscriber) closeClient() {
	s.once.Do(func() {
		s.cl.AllowRebalance()
		s.cl.Close()
	})
}

// Close stops a running Run the way ending its context does, waits for it to
// return, and closes the subscriber. It may be called more than once.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	running := s.running
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.mu.Unlock()
	if running {
		<-s.runDone
	}
	s.closeClient()
	return nil
}

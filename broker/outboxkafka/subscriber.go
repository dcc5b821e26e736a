package outboxkafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/redelivery"
)

// Subscriber consumes the destination topics of Topics in a consumer group
// and hands each message to a handler; see Run.
type Subscriber struct {
	cl          *kgo.Client
	conn        *connection
	clientOpts  []kgo.Opt // SubscriberConfig.ClientOpts
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
	s.cl, err = c.newClient(ctx, state, append(slices.Clone(s.clientOpts),
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
	)...)
	if err != nil {
		return nil, err
	}
	if err := s.ensureDeadLetterTopics(ctx); err != nil {
		s.cl.Close()
		return nil, err
	}
	return s, nil
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

package outboxkafka

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
	"github.com/outbox-go/outbox/internal/brokerconf"
)

// Publisher publishes outbox messages to Kafka with an idempotent producer
// and acks=all. It implements outbox.Publisher and is safe for concurrent use.
type Publisher struct {
	cl     *kgo.Client
	conn   *connection
	source string
	dest   template
	// headers logs the row headers the mapping renames or drops.
	headers *cloudevents.HeaderLog
	state   *connState
	topics  topicCache // destination topics the cluster said exist
	once    sync.Once
	// borrowed: the client is PublisherConfig.Client, which Close leaves open.
	borrowed bool
	// isolated is when isolate last logged, in Unix nanoseconds.
	isolated atomic.Int64
}

var _ outbox.Publisher = (*Publisher)(nil)

// NewPublisher checks cfg, connects, and checks that a broker answers within
// DialTimeout. An unreachable broker fails with an error that satisfies
// outbox.IsUnavailable; a bad config with one that wraps ErrConfig; refused
// credentials with one that wraps ErrRefusedLogin and is not
// outbox.IsUnavailable.
func NewPublisher(ctx context.Context, cfg PublisherConfig) (*Publisher, error) {
	c, err := cfg.connection()
	if err != nil {
		return nil, err
	}
	if err := checkTemplate("Destination", "topic", cfg.Destination); err != nil {
		return nil, err
	}
	if cfg.Source != "" {
		if _, err := url.Parse(cfg.Source); err != nil {
			return nil, configError("Source %q is not a URI reference; use e.g. \"/outbox\"", cfg.Source)
		}
	}
	p := &Publisher{
		conn:   c,
		source: def(cfg.Source, DefaultSource),
		dest:   template(def(cfg.Destination, DefaultDestination)),
		state:  &connState{},
	}
	p.headers = cloudevents.NewHeaderLog(c.logger, "outboxkafka")
	if cfg.Client != nil {
		p.cl, p.borrowed = cfg.Client, true
		return p, nil
	}
	if p.cl, err = c.newClient(ctx, p.state); err != nil {
		return nil, err
	}
	return p, nil
}

// connection fills cfg's zero fields from its URL and returns the
// connection they make. With cfg.Client the URL is optional.
func (cfg *PublisherConfig) connection() (*connection, error) {
	if cfg.Client != nil && cfg.URL == "" {
		c := &connection{redacted: "the caller's client", q: brokerconf.NewQuery(nil, configError)}
		return c, c.common(cfg.ClientID, cfg.DialTimeout, cfg.Timeout, cfg.MaxMessageBytes, cfg.Compression, cfg.TLS, cfg.Logger)
	}
	c, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if err := c.publisherFields(cfg); err != nil {
		return nil, err
	}
	c.sasl = cfg.SASL
	c.autoCreate = cfg.AutoCreateTopics
	return c, c.common(cfg.ClientID, cfg.DialTimeout, cfg.Timeout, cfg.MaxMessageBytes, cfg.Compression, cfg.TLS, cfg.Logger)
}

// publisherFields fills cfg's zero fields from the URL's parameters.
func (c *connection) publisherFields(cfg *PublisherConfig) error {
	c.q.String(&cfg.Source, "source")
	c.q.String(&cfg.Destination, "topic")
	return c.q.Bool(&cfg.AutoCreateTopics, "auto_create")
}

// ParseURL returns the PublisherConfig that a broker URL describes, for a
// caller that takes the URL from the command line and then sets fields in
// Go: every query parameter is moved into its field (the TLS files loaded
// into TLS), and URL keeps only the brokers, the credentials and sasl. A
// field changed afterwards wins, including a boolean the URL turned on.
// Errors wrap ErrConfig and never contain the password.
func ParseURL(raw string) (PublisherConfig, error) {
	c, err := parseURL(raw)
	if err != nil {
		return PublisherConfig{}, err
	}
	var cfg PublisherConfig
	if err := c.publisherFields(&cfg); err != nil {
		return PublisherConfig{}, err
	}
	if err := c.common("", 0, 0, 0, "", nil, nil); err != nil {
		return PublisherConfig{}, err
	}
	q := c.q
	q.String(&cfg.ClientID, "client_id")
	q.String(&cfg.Compression, "compression")
	// common checked these parameters; reading them cannot fail.
	_ = q.Duration(&cfg.DialTimeout, "dial_timeout")
	_ = q.Duration(&cfg.Timeout, "timeout")
	_ = q.Int(&cfg.MaxMessageBytes, "max_message_bytes")
	cfg.TLS = c.tls
	cfg.URL = brokerconf.Without(raw, func(name string) bool { return name != "sasl" })
	return cfg, nil
}

// credentialsHint names what to check when the brokers refuse the login.
func (c *connection) credentialsHint() string {
	if c.sasl != nil {
		return "PublisherConfig.SASL: its user, password or token and its mechanism"
	}
	return "the URL's user, password or token and its sasl parameter"
}

// newClient builds a client and checks that a broker answers. Refused
// credentials wrap ErrRefusedLogin; no answer is outbox.Unavailable.
func (c *connection) newClient(ctx context.Context, state *connState, extra ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append(c.clientOpts(state), extra...)...)
	if err != nil {
		return nil, configError("%s: %v", c.redacted, err)
	}
	pctx, cancel := context.WithTimeout(ctx, c.dialTimeout)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		cl.Close()
		if isAuthError(err) {
			return nil, fmt.Errorf("%w at %s (check %s): %w", ErrRefusedLogin, c.redacted, c.credentialsHint(), err)
		}
		if reason := state.suffix(); reason != "" && !isConnectionError(err) {
			err = fmt.Errorf("%w%s", err, reason)
		}
		return nil, outbox.Unavailable(fmt.Errorf("outboxkafka: no broker of %s answered within %s: %w", c.redacted, c.dialTimeout, err))
	}
	return cl, nil
}

// Publish produces every message of the batch without waiting, then waits for
// the acks. It returns nil when every message was acked (written by the
// partition leader and its in-sync replicas), or one error per message.
//
// A batch with several messages of one key goes in waves
// (outbox.PublishWaves): a key's next message is produced only once its
// previous one has its ack, so that a refusal of one record batch cannot let
// a later message of the key be written first. When a keyed message fails,
// the later messages of its key in the batch get outbox.ErrHeldBack and are
// not produced.
//
// A message whose record cannot fit in MaxMessageBytes (ErrTooLarge), or
// whose destination is not a valid topic name, is not sent and its error
// satisfies outbox.IsUndeliverable: the relay makes it DEAD at once. One
// whose destination topic does not exist (ErrUnknownTopic) is refused before
// anything is sent. A record still without an ack when ctx (or Timeout) ends
// is reported as outbox.Unavailable; it may still be written later, which
// the consumers' inbox absorbs.
//
// When the broker refuses a record batch for what it holds (one record the
// topic cannot take, or a batch over the topic's max.message.bytes), every
// record of that partition fails with it; Publish then sends those records
// again one at a time, so that only the one at fault is refused.
//
// Publish asks the cluster whether a destination topic exists the first time
// it sees the topic, and again after a record to it failed for a missing
// topic or without an answer; a topic found to exist is not asked about
// again. When no broker answers that question, nothing of the batch is sent:
// the messages it would have produced are outbox.Unavailable.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.conn.timeout)
	defer cancel()
	if err := ctx.Err(); err != nil {
		errs := make([]error, len(msgs))
		for i := range msgs {
			errs[i] = outbox.Unavailable(fmt.Errorf("outboxkafka: not sent, the context had ended: %w", err))
		}
		return errs
	}
	topics := make([]string, len(msgs))
	for i := range msgs {
		topics[i] = p.dest.render(msgs[i].Topic)
	}
	// A batch with a topic that could not be checked sends nothing: a later
	// message could otherwise overtake an earlier one of its key.
	var check topicCheck
	if unknown := p.topics.unknown(topics); len(unknown) > 0 {
		check.errs, check.err = p.checkTopics(ctx, unknown)
	}
	return outbox.PublishWaves(ctx, msgs, func(ctx context.Context, wave []outbox.Message) []error {
		return p.publishWave(ctx, wave, check)
	})
}

// topicCheck is what Publish learned about a batch's destination topics
// before producing: the error of each topic found missing, and the error of
// a check no broker answered.
type topicCheck struct {
	errs map[string]error
	err  error
}

// publishWave produces msgs, in which no key appears twice, and waits for
// their acks; records of a refused batch are sent again one at a time.
func (p *Publisher) publishWave(ctx context.Context, msgs []outbox.Message, check topicCheck) []error {
	w := newWaiter(len(msgs), p.state, &p.topics)
	for i := range msgs {
		m := &msgs[i]
		topic := p.dest.render(m.Topic)
		w.topics[i] = topic
		if reason := validTopic(topic); reason != "" {
			w.finishOwn(i, cloudevents.Undeliverable("Kafka", m, fmt.Sprintf("destination %q of topic %q", topic, m.Topic), "is not a valid Kafka topic name: "+reason))
			continue
		}
		if err := check.errs[topic]; err != nil {
			w.finishOwn(i, err)
			continue
		}
		rec := newRecord(m, topic, p.source)
		if n := recordBytes(rec); n > p.conn.maxBytes {
			w.finishOwn(i, outbox.Undeliverable(fmt.Errorf("%w (%d bytes with headers, limit %d)", ErrTooLarge, n, p.conn.maxBytes)))
			continue
		}
		p.headers.Check(m)
		if check.err != nil {
			w.finishOwn(i, check.err)
			continue
		}
		p.cl.Produce(ctx, rec, func(r *kgo.Record, err error) { w.finish(i, r.Partition, err) })
	}
	errs := w.wait(ctx)
	if errs != nil && p.isolate(ctx, msgs, w.topics, w.partitions, errs) {
		for _, err := range errs {
			if err != nil {
				return errs
			}
		}
		return nil
	}
	return errs
}

// batchRefusal reports the Kafka error codes with which a broker refuses a
// whole record batch for what is in it: a batch over the topic's
// max.message.bytes, or one record in it that is invalid. franz-go then fails
// every record buffered for that partition with the same error, so the
// records that share the batch with the one at fault, or that are each small
// enough but too many together, fail with it.
func batchRefusal(err error) bool {
	for _, ke := range []*kerr.Error{
		kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord,
		kerr.CorruptMessage, kerr.InvalidTimestamp,
	} {
		if errors.Is(err, ke) {
			return true
		}
	}
	return false
}

type topicPartition struct {
	topic     string
	partition int32
}

// isolate sends again, one record at a time, the messages of each partition
// whose records failed together with a batch refusal, and replaces their
// errors with what each one's own record got. Without it, one record a topic
// cannot take (or a batch too big for the topic's max.message.bytes) fails
// every record of its partition, and each of them spends a retry; batch
// after batch, good messages go DEAD.
//
// The records of a partition go in the batch's order, each after the
// previous one's ack. A record not sent before ctx ends gets ErrHeldBack: it
// spends no retry and does not pause the relay, and the next claim sends it.
//
// It reports whether it sent anything again.
func (p *Publisher) isolate(ctx context.Context, msgs []outbox.Message, topics []string, partitions []int32, errs []error) bool {
	groups := map[topicPartition][]int{}
	for i, err := range errs {
		if err != nil && partitions[i] >= 0 && batchRefusal(err) {
			tp := topicPartition{topics[i], partitions[i]}
			groups[tp] = append(groups[tp], i)
		}
	}
	var wg sync.WaitGroup
	for tp, idx := range groups {
		if len(idx) < 2 {
			continue // the record at fault, alone in its batch
		}
		p.logIsolation(tp, len(idx), errs[idx[0]])
		wg.Go(func() { p.oneByOne(ctx, msgs, topics, idx, errs) })
	}
	wg.Wait()
	return len(groups) > 0
}

// isolationLogEvery is how often, at most, isolate logs.
const isolationLogEvery = time.Minute

// logIsolation warns, at most once a minute, that the records of a refused
// batch are being sent one at a time: with a topic whose max.message.bytes
// is below MaxMessageBytes that happens to most batches, and each record
// then costs a round trip.
func (p *Publisher) logIsolation(tp topicPartition, n int, err error) {
	now := time.Now().UnixNano()
	last := p.isolated.Load()
	if now-last < int64(isolationLogEvery) || !p.isolated.CompareAndSwap(last, now) {
		return
	}
	p.conn.logger.Warn("outboxkafka: the broker refused a record batch as a whole; its records are sent again one at a time, to refuse only the one at fault. "+
		"If the records are small, the topic's max.message.bytes is below max_message_bytes: set max_message_bytes to it",
		"topic", tp.topic, "partition", tp.partition, "records", n, "error", err)
}

// oneByOne produces the records of msgs[idx] one at a time, each in its own
// record batch, and sets their errors.
func (p *Publisher) oneByOne(ctx context.Context, msgs []outbox.Message, topics []string, idx []int, errs []error) {
	for _, i := range idx {
		m := &msgs[i]
		if ctx.Err() != nil {
			errs[i] = fmt.Errorf("%w: not sent again: the deadline ended while the records of a refused batch were sent one at a time (the first refusal: %w)", ErrHeldBack, errs[i])
			continue
		}
		// A fresh record: franz-go keeps the context of an earlier produce in the record.
		res := p.cl.ProduceSync(ctx, newRecord(m, topics[i], p.source))
		err := res[0].Err
		if err != nil {
			err = classify(err, topics[i], p.state)
		}
		errs[i] = err
	}
}

// Close flushes nothing: it fails records still waiting (their Publish calls
// report outbox.Unavailable) and closes the connections.
func (p *Publisher) Close() error {
	if !p.borrowed {
		p.once.Do(p.cl.Close)
	}
	return nil
}

// waiter collects one Publish call's results. franz-go calls the promises
// from its own goroutines, possibly after Publish gave up waiting.
type waiter struct {
	mu         sync.Mutex
	errs       []error // final errors, classified
	topics     []string
	partitions []int32 // where franz-go put each record; -1 for a result Publish decided itself
	finished   []bool
	pending    int
	failed     bool
	done       chan struct{}
	closed     bool // Publish returned; later results are dropped
	state      *connState
	known      *topicCache
}

func newWaiter(n int, state *connState, known *topicCache) *waiter {
	return &waiter{state: state, known: known,
		errs: make([]error, n), topics: make([]string, n), partitions: make([]int32, n), finished: make([]bool, n),
		pending: n, done: make(chan struct{}),
	}
}

// finish records franz-go's result for message i, produced to partition.
func (w *waiter) finish(i int, partition int32, err error) {
	if err != nil {
		err = classify(err, w.topics[i], w.state)
		if errors.Is(err, ErrUnknownTopic) || outbox.IsUnavailable(err) {
			w.known.forget(w.topics[i])
		}
	}
	w.record(i, partition, err)
}

// finishOwn records a result Publish decided itself.
func (w *waiter) finishOwn(i int, err error) { w.record(i, -1, err) }

func (w *waiter) record(i int, partition int32, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.finished[i] {
		return
	}
	w.partitions[i] = partition
	w.finished[i] = true
	w.errs[i] = err
	w.failed = w.failed || err != nil
	w.pending--
	if w.pending == 0 {
		close(w.done)
	}
}

// wait returns the results when all are in, or when ctx ends, with the
// missing ones reported as outbox.Unavailable.
func (w *waiter) wait(ctx context.Context) []error {
	select {
	case <-w.done:
	case <-ctx.Done():
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.pending == 0 && !w.failed {
		return nil
	}
	out := make([]error, len(w.errs))
	for i, err := range w.errs {
		if !w.finished[i] {
			w.known.forget(w.topics[i])
			err = outbox.Unavailable(fmt.Errorf("outboxkafka: no ack for topic %q before the context ended%s (the record may still be written): %w",
				w.topics[i], w.state.suffix(), context.Cause(ctx)))
		}
		out[i] = err
	}
	return out
}

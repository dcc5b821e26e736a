package outboxkafka

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox"
)

// Publisher publishes outbox messages to Kafka with an idempotent producer
// and acks=all. It implements outbox.Publisher and is safe for concurrent use.
type Publisher struct {
	cl     *kgo.Client
	conn   *connection
	source string
	dest   template
	state  *connState
	topics topicCache // destination topics the cluster said exist
	once   sync.Once
}

var _ outbox.Publisher = (*Publisher)(nil)

// NewPublisher checks cfg, connects, and checks that a broker answers within
// DialTimeout. An unreachable broker fails with an error that satisfies
// outbox.IsUnavailable; a bad config with one that wraps ErrConfig.
func NewPublisher(ctx context.Context, cfg PublisherConfig) (*Publisher, error) {
	c, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if err := c.common(cfg.ClientID, cfg.DialTimeout, cfg.Timeout, cfg.MaxMessageBytes, cfg.Compression, cfg.TLS, cfg.Logger); err != nil {
		return nil, err
	}
	c.autoCreate = c.autoCreate || cfg.AutoCreateTopics
	c.str("source", &cfg.Source)
	c.str("topic", &cfg.Destination)
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
	if p.cl, err = c.newClient(ctx, p.state); err != nil {
		return nil, err
	}
	return p, nil
}

// newClient builds a client and checks that a broker answers.
func (c *connection) newClient(ctx context.Context, state *connState, extra ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append(c.clientOpts(state), extra...)...)
	if err != nil {
		return nil, configError("%s: %v", c.redacted, err)
	}
	pctx, cancel := context.WithTimeout(ctx, c.dialTimeout)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		cl.Close()
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
// A message whose record cannot fit in MaxMessageBytes, whose destination is
// not a valid topic name, or whose destination topic does not exist
// (ErrUnknownTopic) is refused before anything is sent, and the
// later messages of its key in the batch get ErrHeldBack instead of being
// produced, so they cannot overtake it. A record still without an ack when
// ctx (or Timeout) ends is reported as outbox.Unavailable; it may still be
// written later, which the consumers' inbox absorbs.
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
	w := newWaiter(len(msgs), p.state, &p.topics)
	for i := range msgs {
		w.topics[i] = p.dest.render(msgs[i].Topic)
	}
	// A batch with a topic that could not be checked sends nothing: a later
	// message could otherwise overtake an earlier one of its key.
	var topicErrs map[string]error
	var checkErr error
	if unknown := p.topics.unknown(w.topics); len(unknown) > 0 {
		topicErrs, checkErr = p.checkTopics(ctx, unknown)
	}
	var failedKeys map[string]string
	refuse := func(i int, err error) {
		w.finishOwn(i, err)
		if k := msgs[i].Key; k != "" {
			if failedKeys == nil {
				failedKeys = map[string]string{}
			}
			if _, ok := failedKeys[k]; !ok {
				failedKeys[k] = msgs[i].MsgID
			}
		}
	}
	for i := range msgs {
		m := &msgs[i]
		topic := w.topics[i]
		if first, held := failedKeys[m.Key]; held && m.Key != "" {
			w.finishOwn(i, fmt.Errorf("%w (msg_id %q failed first)", ErrHeldBack, first))
			continue
		}
		if reason := validTopic(topic); reason != "" {
			refuse(i, fmt.Errorf("outboxkafka: destination %q of topic %q is not a valid Kafka topic name: %s", topic, m.Topic, reason))
			continue
		}
		if err := topicErrs[topic]; err != nil {
			refuse(i, err)
			continue
		}
		rec := newRecord(m, topic, p.source)
		if n := recordBytes(rec); n > p.conn.maxBytes {
			refuse(i, fmt.Errorf("%w (%d bytes with headers, limit %d)", ErrTooLarge, n, p.conn.maxBytes))
			continue
		}
		if checkErr != nil {
			w.finishOwn(i, checkErr)
			continue
		}
		p.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { w.finish(i, err) })
	}
	return w.wait(ctx)
}

// Close flushes nothing: it fails records still waiting (their Publish calls
// report outbox.Unavailable) and closes the connections.
func (p *Publisher) Close() error {
	p.once.Do(p.cl.Close)
	return nil
}

// waiter collects one Publish call's results. franz-go calls the promises
// from its own goroutines, possibly after Publish gave up waiting.
type waiter struct {
	mu       sync.Mutex
	errs     []error // final errors, classified
	topics   []string
	finished []bool
	pending  int
	failed   bool
	done     chan struct{}
	closed   bool // Publish returned; later results are dropped
	state    *connState
	known    *topicCache
}

func newWaiter(n int, state *connState, known *topicCache) *waiter {
	return &waiter{state: state, known: known,
		errs: make([]error, n), topics: make([]string, n), finished: make([]bool, n),
		pending: n, done: make(chan struct{}),
	}
}

// finish records franz-go's result for message i.
func (w *waiter) finish(i int, err error) {
	if err != nil {
		err = classify(err, w.topics[i], w.state)
		if errors.Is(err, ErrUnknownTopic) || outbox.IsUnavailable(err) {
			w.known.forget(w.topics[i])
		}
	}
	w.finishOwn(i, err)
}

// finishOwn records a result Publish decided itself.
func (w *waiter) finishOwn(i int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.finished[i] {
		return
	}
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

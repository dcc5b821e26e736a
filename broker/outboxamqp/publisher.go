package outboxamqp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox"
)

// ErrClosed is the error of a call on a Publisher or Subscriber after Close.
// Publish wraps it with outbox.Unavailable, so that no retry is spent.
var ErrClosed = errors.New("outboxamqp: closed")

// ErrTooLarge marks a message refused without being sent because its body is
// larger than PublisherConfig.MaxMessageBytes. The error satisfies
// outbox.IsUndeliverable: the relay makes the message DEAD at once.
var ErrTooLarge = errors.New("outboxamqp: message larger than MaxMessageBytes")

// ErrHeldBack marks a message that was not sent because an earlier message
// with the same key in the same Publish call failed.
// It is outbox.ErrHeldBack: the relay leaves the message untouched.
var ErrHeldBack = outbox.ErrHeldBack

// ReturnedError is the error of a message the broker returned (basic.return):
// with the mandatory flag, a message that no queue is bound to receive. It is
// a refusal: it spends one of the message's retries.
type ReturnedError struct {
	Exchange   string
	RoutingKey string
	// Code and Reason are the broker's reply, e.g. 312 NO_ROUTE.
	Code   uint16
	Reason string
}

func (e *ReturnedError) Error() string {
	return fmt.Sprintf("outboxamqp: the broker returned the message: %d %s: no queue is bound to exchange %q with a key matching routing key %q (start a subscriber of the group first, or bind a queue)",
		e.Code, e.Reason, e.Exchange, e.RoutingKey)
}

// ErrBlocked marks a message not sent because RabbitMQ blocks publishers on
// the connection (connection.blocked: a memory or disk alarm). The error
// satisfies outbox.IsUnavailable: the relay pauses without spending retries.
var ErrBlocked = errors.New("outboxamqp: RabbitMQ blocks publishers: a resource alarm (memory or disk, see rabbitmq-diagnostics alarms)")

// ErrNacked marks a message the broker negatively acknowledged (basic.nack):
// it could not take it, e.g. a queue in reject-publish overflow. It is a
// refusal: it spends one of the message's retries.
var ErrNacked = errors.New("outboxamqp: the broker nacked the message")

// Publisher publishes outbox messages to a RabbitMQ exchange with publisher
// confirms, the mandatory flag and persistent delivery; see the package
// documentation. It is safe for concurrent use: each Publish call takes a
// channel of its own from a pool over one connection.
type Publisher struct {
	s *publisherSettings

	mu     sync.Mutex
	conn   *amqp.Connection
	block  *connBlock // conn's blocked state
	idle   []*confirmChannel
	closed bool
	wg     sync.WaitGroup // the channels' confirm readers

	dialing chan struct{} // one connection attempt at a time
}

var _ outbox.Publisher = (*Publisher)(nil)

// NewPublisher checks cfg, connects to the broker and declares the exchange.
// An error wraps ErrConfig for a bad config, ErrRefusedLogin or ErrTopology
// when the broker refused, and satisfies outbox.IsUnavailable when it could
// not be reached.
func NewPublisher(ctx context.Context, cfg PublisherConfig) (*Publisher, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	p := &Publisher{s: s, dialing: make(chan struct{}, 1)}
	if _, _, err := p.connection(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// Close closes the connection. A Publish still waiting for confirms reports
// its messages as outbox.Unavailable.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conn := p.conn
	p.conn, p.idle = nil, nil
	p.mu.Unlock()
	var err error
	if conn != nil {
		err = conn.Close()
		if errors.Is(err, amqp.ErrClosed) {
			err = nil
		}
	}
	p.wg.Wait()
	return err
}

// Publish sends the batch on one channel, all messages before waiting, then
// waits for the broker's confirms. It returns nil when every message was
// confirmed and routed, else one error per message (see the package
// documentation for what each error means).
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.s.timeout,
		fmt.Errorf("outboxamqp: no confirm within the publisher's Timeout of %s", p.s.timeout))
	defer cancel()
	if err := ctx.Err(); err != nil {
		return fill(len(msgs), outbox.Unavailable(fmt.Errorf("outboxamqp: not published: %w", context.Cause(ctx))))
	}
	c, err := p.acquire(ctx)
	if err != nil {
		return fill(len(msgs), err)
	}
	errs := outbox.PublishWaves(ctx, msgs, func(ctx context.Context, wave []outbox.Message) []error {
		errs := c.publish(ctx, p.s, wave)
		for _, err := range errs {
			if err != nil {
				return errs
			}
		}
		return nil
	})
	p.release(c)
	return errs
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// connBlock is whether RabbitMQ blocks publishers on a connection: during a
// resource alarm (memory or disk) it sends connection.blocked and stops
// reading from a connection that publishes, so that a write could wait for as
// long as the alarm lasts, whatever the context says (amqp091-go does not
// interrupt a write). Publish sends nothing on a blocked connection.
type connBlock struct {
	reason atomic.Pointer[string] // nil while not blocked
}

// watch follows conn's blocked and unblocked notices until it closes.
func (b *connBlock) watch(notices <-chan amqp.Blocking) {
	for n := range notices {
		if n.Active {
			reason := n.Reason
			b.reason.Store(&reason)
		} else {
			b.reason.Store(nil)
		}
	}
}

// blocked returns the broker's reason when it blocks publishers.
func (b *connBlock) blocked() (string, bool) {
	if b == nil {
		return "", false
	}
	if r := b.reason.Load(); r != nil {
		return *r, true
	}
	return "", false
}

// connection returns the open connection and its blocked state, connecting
// when there is none.
func (p *Publisher) connection(ctx context.Context) (*amqp.Connection, *connBlock, error) {
	select {
	case p.dialing <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, outbox.Unavailable(fmt.Errorf("outboxamqp: connect to %s: %w", p.s.redacted, context.Cause(ctx)))
	}
	defer func() { <-p.dialing }()
	p.mu.Lock()
	conn, block, closed := p.conn, p.block, p.closed
	p.mu.Unlock()
	if closed {
		return nil, nil, outbox.Unavailable(ErrClosed)
	}
	if conn != nil && !conn.IsClosed() {
		return conn, block, nil
	}
	conn, err := p.s.dial(ctx, "outbox publisher")
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = declareExchange(ch, p.s.exchange, p.s.kind, p.s.noDeclare)
		ch.Close()
	} else {
		err = outbox.Unavailable(fmt.Errorf("outboxamqp: open a channel on %s: %w", p.s.redacted, err))
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	lost := conn.NotifyClose(make(chan *amqp.Error, 1))
	block = &connBlock{}
	notices := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		conn.Close()
		return nil, nil, outbox.Unavailable(ErrClosed)
	}
	reconnected := p.conn != nil
	p.conn, p.block, p.idle = conn, block, nil
	p.wg.Add(2)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		block.watch(notices)
	}()
	if reconnected {
		p.s.logger.Info("outboxamqp: publisher reconnected", "broker", p.s.redacted)
	}
	go func() {
		defer p.wg.Done()
		if e, ok := <-lost; ok && e != nil {
			p.s.logger.Warn("outboxamqp: publisher lost its connection; it reconnects on the next Publish",
				"broker", p.s.redacted, "error", e.Error())
		}
	}()
	return conn, block, nil
}

// acquire returns an idle channel of the current connection, or opens one.
func (p *Publisher) acquire(ctx context.Context) (*confirmChannel, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, outbox.Unavailable(ErrClosed)
	}
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if c.alive() {
			p.mu.Unlock()
			return c, nil
		}
	}
	p.mu.Unlock()
	conn, block, err := p.connection(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		if err = ch.Confirm(false); err != nil {
			ch.Close()
		}
	}
	if err != nil {
		return nil, outbox.Unavailable(fmt.Errorf("outboxamqp: open a channel in confirm mode on %s: %w", p.s.redacted, err))
	}
	c := newConfirmChannel(ch)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		ch.Close()
		return nil, outbox.Unavailable(ErrClosed)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		c.read()
	}()
	c.conn, c.block = conn, block
	return c, nil
}

// release puts c back in the pool if it still works.
func (p *Publisher) release(c *confirmChannel) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.alive() && !p.closed && c.conn == p.conn {
		p.idle = append(p.idle, c)
		return
	}
	c.ch.Close()
}

// confirmChannel is a channel in confirm mode, used by one Publish call at a
// time, with a goroutine that matches the broker's confirms and returns to
// the messages waiting for them.
type confirmChannel struct {
	conn     *amqp.Connection
	block    *connBlock // conn's
	ch       *amqp.Channel
	confirms <-chan amqp.Confirmation
	returns  <-chan amqp.Return
	closes   <-chan *amqp.Error

	mu      sync.Mutex
	pending map[uint64]*slot // by delivery tag
	// returned holds, per message-id, the returns whose ack has not come yet.
	// RabbitMQ sends a message's basic.return before its basic.ack, and acks
	// in tag order, so the oldest return of a msg_id belongs to the next
	// acked message with that msg_id.
	returned map[string][]amqp.Return
	err      error // why the channel closed; nil while it is open
}

type slot struct {
	b     *batch
	i     int
	msgID string
}

// batch is one Publish call's view of its messages.
type batch struct {
	errs     []error
	resolved []bool
	left     int  // published, not yet confirmed
	sealed   bool // every message has been published (or given up)
	finished bool // Publish stopped waiting; late confirms change nothing
	done     chan struct{}
}

func newConfirmChannel(ch *amqp.Channel) *confirmChannel {
	return &confirmChannel{
		ch: ch,
		// amqp091-go hands each confirm and return to these unbuffered
		// channels from its reader goroutine, in the order the broker sent
		// them, and drops one that waits longer than 5s; read() takes them
		// at once.
		confirms: ch.NotifyPublish(make(chan amqp.Confirmation)),
		returns:  ch.NotifyReturn(make(chan amqp.Return)),
		closes:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		pending:  map[uint64]*slot{},
		returned: map[string][]amqp.Return{},
	}
}

func (c *confirmChannel) alive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil
}

// read takes confirms and returns until the channel closes, then fails what
// is still pending.
func (c *confirmChannel) read() {
	confirms, returns := c.confirms, c.returns
	for confirms != nil || returns != nil {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			c.mu.Lock()
			c.returned[r.MessageId] = append(c.returned[r.MessageId], r)
			c.mu.Unlock()
		case cf, ok := <-confirms:
			if !ok {
				confirms = nil
				continue
			}
			c.confirm(cf)
		}
	}
	reason := errors.New("the channel was closed")
	if e, ok := <-c.closes; ok && e != nil {
		reason = e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = reason
	for tag, s := range c.pending {
		delete(c.pending, tag)
		s.b.resolve(s.i, outbox.Unavailable(fmt.Errorf("outboxamqp: connection to the broker lost before the confirm: %w", reason)))
	}
}

func (c *confirmChannel) confirm(cf amqp.Confirmation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.pending[cf.DeliveryTag]
	if s == nil {
		return
	}
	delete(c.pending, cf.DeliveryTag)
	var err error
	if rs := c.returned[s.msgID]; len(rs) > 0 {
		r := rs[0]
		if len(rs) == 1 {
			delete(c.returned, s.msgID)
		} else {
			c.returned[s.msgID] = rs[1:]
		}
		err = &ReturnedError{Exchange: r.Exchange, RoutingKey: r.RoutingKey, Code: r.ReplyCode, Reason: r.ReplyText}
	} else if !cf.Ack {
		err = ErrNacked
	}
	s.b.resolve(s.i, err)
}

// resolve records message i's outcome. The caller holds the channel's lock.
func (b *batch) resolve(i int, err error) {
	if b.finished || b.resolved[i] {
		return
	}
	b.resolved[i] = true
	b.errs[i] = err
	b.left--
	if b.sealed && b.left == 0 {
		close(b.done)
	}
}

// publish sends msgs, then waits for their confirms until ctx ends.
func (c *confirmChannel) publish(ctx context.Context, s *publisherSettings, msgs []outbox.Message) []error {
	b := &batch{errs: make([]error, len(msgs)), resolved: make([]bool, len(msgs)), done: make(chan struct{})}
	fail := func(i int, err error) { b.errs[i], b.resolved[i] = err, true }
	for i := range msgs {
		m := &msgs[i]
		if len(m.Payload) > s.maxBytes {
			fail(i, outbox.Undeliverable(fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, len(m.Payload), s.maxBytes)))
			continue
		}
		if err := ctx.Err(); err != nil {
			fail(i, outbox.Unavailable(fmt.Errorf("outboxamqp: not published: %w", context.Cause(ctx))))
			continue
		}
		if reason, blocked := c.block.blocked(); blocked {
			fail(i, outbox.Unavailable(fmt.Errorf("%w (%s): not sent until the alarm clears", ErrBlocked, reason)))
			continue
		}
		pub := publishing(m, s.source)
		key := strings.ReplaceAll(s.routingKey, "{topic}", m.Topic)
		if err := check(m, key, &pub, c.conn.Config.FrameSize); err != nil {
			fail(i, err)
			continue
		}
		s.headers.Check(m)
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			fail(i, outbox.Unavailable(fmt.Errorf("outboxamqp: connection to the broker lost: %w", err)))
			continue
		}
		tag := c.ch.GetNextPublishSeqNo()
		c.pending[tag] = &slot{b: b, i: i, msgID: m.MsgID}
		b.left++
		c.mu.Unlock()
		// The context does not interrupt a write in amqp091-go. A broker
		// that blocks publishers (a resource alarm) says so first
		// (connBlock), and nothing more is written; what was written before
		// the notice shows as confirms that do not come before ctx ends.
		if err := c.ch.PublishWithContext(ctx, s.exchange, key, true, false, pub); err != nil {
			c.mu.Lock()
			if _, ok := c.pending[tag]; ok {
				delete(c.pending, tag)
				b.left--
				fail(i, outbox.Unavailable(fmt.Errorf("outboxamqp: publish: %w", err)))
			}
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	b.sealed = true
	if b.left == 0 {
		close(b.done)
	}
	c.mu.Unlock()

	select {
	case <-b.done:
	case <-ctx.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b.finished = true
	for i, ok := range b.resolved {
		if !ok {
			b.errs[i] = outbox.Unavailable(fmt.Errorf("outboxamqp: no confirm from the broker: %w", context.Cause(ctx)))
		}
	}
	// The slots of unconfirmed messages stay in pending, so that their late
	// confirms still consume their returns.
	return b.errs
}

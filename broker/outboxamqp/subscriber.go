package outboxamqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/redelivery"
)

// ErrQueueDeleted is the error of Run when the broker cancelled the consumer
// because the group's queue was deleted. (The broker also cancels consumers
// when it shuts down; Run then reconnects.)
var ErrQueueDeleted = errors.New("outboxamqp: the group's queue was deleted")

// Subscriber consumes one group's queue and hands each message to a handler;
// see the package documentation. Several subscribers of one group, in one
// process or many, share the queue's messages.
type Subscriber struct {
	s *subscriberSettings

	mu     sync.Mutex
	closed bool
	conns  map[*amqp.Connection]bool // of the running Run calls
}

// NewSubscriber checks cfg, connects to the broker and declares the
// exchange, the group's quorum queue with its binding, and the dead-letter
// queue; when it returns, messages published to the exchange reach the
// group even before Run is called. An error wraps ErrConfig for a bad
// config, ErrRefusedLogin or ErrTopology when the broker refused, and
// satisfies outbox.IsUnavailable when it could not be reached.
func NewSubscriber(ctx context.Context, cfg SubscriberConfig) (*Subscriber, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	sub := &Subscriber{s: s, conns: map[*amqp.Connection]bool{}}
	conn, err := s.dial(ctx, "outbox subscriber "+s.group)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, outbox.Unavailable(fmt.Errorf("outboxamqp: open a channel on %s: %w", s.redacted, err))
	}
	defer ch.Close()
	if err := sub.declare(ch); err != nil {
		return nil, err
	}
	return sub, nil
}

// Queue returns the name of the group's queue.
func (sub *Subscriber) Queue() string { return sub.s.queue }

// DeadLetterQueue returns the name of the group's dead-letter queue.
func (sub *Subscriber) DeadLetterQueue() string { return sub.s.deadQueue }

// declare declares the topology the group needs. Every declaration is
// idempotent while the settings stay the same.
func (sub *Subscriber) declare(ch *amqp.Channel) error {
	s := sub.s
	if err := declareExchange(ch, s.exchange, s.kind, s.noDeclare); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(s.deadQueue, true, false, false, false, amqp.Table{
		amqp.QueueTypeArg: amqp.QueueTypeQuorum,
	}); err != nil {
		return topologyError(fmt.Sprintf("declare dead-letter queue %q (durable quorum)", s.deadQueue), err)
	}
	if _, err := ch.QueueDeclare(s.queue, true, false, false, false, amqp.Table{
		amqp.QueueTypeArg: amqp.QueueTypeQuorum,
		// RabbitMQ dead-letters a message once it has been returned more
		// than x-delivery-limit times: MaxDeliveries deliveries in all.
		"x-delivery-limit": int64(s.maxDeliveries - 1),
		// Through the default exchange, straight to the dead-letter queue.
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": s.deadQueue,
		// At-least-once dead-lettering keeps a message in the queue until
		// the dead-letter queue has confirmed it; RabbitMQ requires
		// reject-publish overflow for it (the queue has no length limit, so
		// nothing is rejected).
		"x-dead-letter-strategy": "at-least-once",
		amqp.QueueOverflowArg:    amqp.QueueOverflowRejectPublish,
	}); err != nil {
		return topologyError(fmt.Sprintf("declare queue %q (durable quorum, x-delivery-limit %d, dead letters to %q)", s.queue, s.maxDeliveries-1, s.deadQueue), err)
	}
	if err := ch.QueueBind(s.queue, s.bindingKey, s.exchange, false, nil); err != nil {
		return topologyError(fmt.Sprintf("bind queue %q to exchange %q with key %q", s.queue, s.exchange, s.bindingKey), err)
	}
	return nil
}

// Close ends a running Run, which returns ErrClosed, and makes later calls of
// Run return ErrClosed. Stop Run through its context instead to finish the
// message in hand.
func (sub *Subscriber) Close() error {
	sub.mu.Lock()
	sub.closed = true
	conns := sub.conns
	sub.conns = map[*amqp.Connection]bool{}
	sub.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	return nil
}

func (sub *Subscriber) isClosed() bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.closed
}

// Run consumes the group's queue and calls h for each message, one at a
// time, until ctx ends; then it lets the handler in hand finish, acks it
// (or requeues it if h failed), and returns nil. A message whose handler
// failed is held and handed to h again after RedeliveryDelay (doubling, up
// to RedeliveryDelayMax) while the messages behind it wait; it is
// dead-lettered at a failure that is at least the MaxDeliveries-th once it
// has been failing for DeadLetterAfter, or at once for an error wrapped
// with outbox.Permanent. An error for which outbox.IsUnavailable holds (the
// handler's database is down) pauses Run with the same growing delay and is
// not counted. h runs with a context that
// keeps ctx's values but not its cancellation, so that the message in hand
// can finish. Run reconnects after a lost connection (a broker restart); it
// returns an error only when consuming cannot go on: the login or a
// declaration refused, the group's queue deleted (ErrQueueDeleted), or Close.
func (sub *Subscriber) Run(ctx context.Context, h outbox.Handler) error {
	if h == nil {
		return fmt.Errorf("%w: Run needs a handler", ErrConfig)
	}
	const firstDelay = 100 * time.Millisecond
	delay := firstDelay
	for {
		if sub.isClosed() {
			return ErrClosed
		}
		connected, err := sub.consume(ctx, h)
		switch {
		case ctx.Err() != nil:
			return nil
		case sub.isClosed():
			return ErrClosed
		case isPermanent(err), errors.Is(err, ErrQueueDeleted):
			return err
		}
		msg := "outboxamqp: subscriber cannot connect; retrying"
		if connected {
			delay = firstDelay
			msg = "outboxamqp: subscriber lost its connection; reconnecting"
		}
		sub.s.logger.Warn(msg, "group", sub.s.group, "broker", sub.s.redacted, "error", err.Error(), "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		delay = min(2*delay, sub.s.reconnectDelay)
	}
}

// consume runs one connection's life: connect, declare, consume until ctx
// ends or the connection is lost. connected reports whether it got as far
// as consuming.
func (sub *Subscriber) consume(ctx context.Context, h outbox.Handler) (connected bool, err error) {
	s := sub.s
	conn, err := s.dial(ctx, "outbox subscriber "+s.group)
	if err != nil {
		return false, err
	}
	sub.mu.Lock()
	if sub.closed {
		sub.mu.Unlock()
		conn.Close()
		return false, ErrClosed
	}
	sub.conns[conn] = true
	sub.mu.Unlock()
	defer func() {
		sub.mu.Lock()
		delete(sub.conns, conn)
		sub.mu.Unlock()
		// Closing the connection requeues the messages prefetched but not
		// handled.
		conn.Close()
	}()
	ch, err := conn.Channel()
	if err != nil {
		return false, outbox.Unavailable(fmt.Errorf("outboxamqp: open a channel on %s: %w", s.redacted, err))
	}
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	// A channel closed while handle waits to call the handler again: the
	// broker has taken the message back.
	lost := make(chan struct{})
	go func() {
		<-ch.NotifyClose(make(chan *amqp.Error, 1)) //nolint:errcheck // the close itself is the news, not its reason
		close(lost)
	}()
	if err := sub.declare(ch); err != nil {
		return false, err
	}
	if err := ch.Qos(s.prefetch, 0, false); err != nil {
		return false, fmt.Errorf("outboxamqp: set prefetch %d: %w", s.prefetch, err)
	}
	cancelled := ch.NotifyCancel(make(chan string, 1))
	// When ctx ends, amqp091-go cancels the consumer (basic.cancel), so that
	// the broker stops sending while the handler in hand finishes.
	deliveries, err := ch.ConsumeWithContext(ctx, s.queue, "", false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("outboxamqp: consume queue %q: %w", s.queue, err)
	}
	hctx := context.WithoutCancel(ctx)
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case d, ok := <-deliveries:
			if !ok {
				return true, sub.stopped(ctx, conn, chClosed, cancelled)
			}
			if ctx.Err() != nil {
				// Not in hand yet: leave it to the broker, which requeues it
				// when the connection closes.
				return true, nil
			}
			if err := sub.handle(ctx, hctx, lost, h, &d); err != nil {
				return true, err
			}
		}
	}
}

// stopped says why the deliveries stopped: ctx ended (the consumer was
// cancelled on our side: nil), the channel or connection closed, or the
// broker cancelled the consumer.
func (sub *Subscriber) stopped(ctx context.Context, conn *amqp.Connection, chClosed <-chan *amqp.Error, cancelled <-chan string) error {
	if ctx.Err() != nil {
		return nil
	}
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case e, ok := <-chClosed:
		if ok && e != nil {
			return e
		}
		return errors.New("the channel was closed")
	case <-cancelled:
		// A quorum queue cancels its consumers when its node shuts down;
		// only a queue that is gone ends Run.
		if ch, err := conn.Channel(); err == nil {
			_, err := ch.QueueDeclarePassive(sub.s.queue, true, false, false, false, nil)
			var ae *amqp.Error
			if errors.As(err, &ae) && ae.Code == amqp.NotFound {
				return fmt.Errorf("%w: queue %q no longer exists; Run stops rather than declare it again", ErrQueueDeleted, sub.s.queue)
			}
			if err == nil {
				ch.Close()
			}
		}
		return errors.New("the broker cancelled the consumer")
	case <-ctx.Done():
		return nil
	case <-t.C:
		return errors.New("the broker stopped the deliveries")
	}
}

// handle decodes d, calls h and settles d with the broker: ack after
// success; after a failure it holds d and calls h again after the growing
// delay of the redelivery policy, and rejects d without requeue (the
// dead-letter queue) once the policy gives up, at once after a Permanent
// error or for a message that is not an event. A failure that satisfies
// outbox.IsUnavailable pauses without counting. When ctx ends between two
// calls, d is left unsettled, for the next subscriber; when the channel
// closes meanwhile (lost), the broker has taken d back, and handle stops.
func (sub *Subscriber) handle(ctx, hctx context.Context, lost <-chan struct{}, h outbox.Handler, d *amqp.Delivery) error {
	m, err := decode(d)
	if err != nil {
		sub.s.logger.Warn("outboxamqp: dead-lettering a message that is not an outbox event",
			"queue", sub.s.queue, "message_id", d.MessageId, "error", err.Error())
		return settle(d.Reject(false))
	}
	res := sub.s.redelivery.Deliver(priorDeliveries(d), func() error { return h(hctx, m) },
		func(wait time.Duration) bool {
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return false
			case <-lost:
				return false
			case <-t.C:
				return true
			}
		},
		func(r redelivery.Retry) {
			msg := "outboxamqp: handler failed; the message is held and delivered again"
			if r.Unavailable {
				msg = "outboxamqp: handler reports an outage; pausing, the delivery is not counted"
			}
			sub.s.logger.Debug(msg, "queue", sub.s.queue, "msg_id", m.MsgID, "deliveries", r.Deliveries,
				"retry_in", r.Wait, "error", r.Err.Error())
		})
	switch res.Outcome {
	case redelivery.Handled:
		return settle(d.Ack(false))
	case redelivery.DeadLetter:
		sub.s.logger.Warn("outboxamqp: dead-lettering a message whose handler failed",
			"queue", sub.s.queue, "msg_id", m.MsgID, "deliveries", res.Deliveries, "permanent", outbox.IsPermanent(res.Err), "error", res.Err.Error())
		return settle(d.Reject(false))
	}
	// Stopping between two calls: left unsettled, the message goes back to
	// the queue when Run closes the connection. A nack would count as a
	// failed delivery against the queue's x-delivery-limit.
	return nil
}

// priorDeliveries is how many times the broker delivered d before: the
// x-delivery-count header a quorum queue sets on a message it delivers
// again.
func priorDeliveries(d *amqp.Delivery) int {
	switch n := d.Headers["x-delivery-count"].(type) {
	case int64:
		return int(n)
	case int32:
		return int(n)
	case int:
		return n
	}
	return 0
}

// settle wraps the error of an ack, nack or reject: the channel is gone, and
// the broker will deliver the message again.
func settle(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("settle the delivery (the broker will deliver it again): %w", err)
}

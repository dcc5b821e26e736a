package outboxmqtt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
	"github.com/outbox-go/outbox/internal/redelivery"
)

// Subscriber is one member of a consumer group: it consumes the group's
// shared subscription through a persistent MQTT session and hands each
// message to a handler, acknowledging it only after the handler succeeded.
type Subscriber struct {
	s    *subscriberSettings
	name string // the servers, for errors (a ClientConfig hook may change them)
	// attempt, when set, opens Run's network connections (tests cut them).
	attempt func(context.Context, autopaho.ClientConfig, *url.URL) (net.Conn, error)

	mu      sync.Mutex
	running bool
	closed  bool
}

// NewSubscriber validates cfg, applies its defaults, and makes the member's
// persistent session with the group's shared subscription
// "$share/<Group>/<filter>" on the broker, then disconnects. From then on the
// broker keeps this member's share of the messages published to the filter
// (for SessionExpiry), so they reach the group even before Run is called.
// A broker that cannot be reached gives an error that satisfies
// outbox.IsUnavailable.
func NewSubscriber(ctx context.Context, cfg SubscriberConfig) (*Subscriber, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	sub := &Subscriber{s: s}
	sess := newAckSession()
	cm, name, err := dialNamed(ctx, sub.connOptions(sess, nil, nil))
	if err != nil {
		return nil, err
	}
	sub.name = name
	// Messages that arrive on this short connection are not acked (the
	// session's Ack does nothing): the broker sends them again to Run.
	defer disconnect(cm)
	if err := sub.subscribe(ctx, cm); err != nil {
		return nil, err
	}
	return sub, nil
}

func (sub *Subscriber) connOptions(sess *ackSession, onPublish func(paho.PublishReceived) (bool, error), onUp func(*autopaho.ConnectionManager, *paho.Connack)) connOptions {
	s := sub.s
	return connOptions{
		url:            s.url,
		clientID:       s.clientID,
		keepAlive:      s.KeepAlive,
		connectTimeout: s.DialTimeout,
		packetTimeout:  s.DialTimeout,
		tls:            s.TLS,
		sessionExpiry:  uint32(s.SessionExpiry / time.Second), //nolint:gosec // G115: settings() bounds it to 4294967295s
		session:        sess,
		onPublish:      onPublish,
		onUp:           onUp,
		attempt:        sub.attempt,
		configure:      s.ClientConfig,
	}
}

// sharedFilter is the subscription's topic filter.
func (sub *Subscriber) sharedFilter() string {
	return "$share/" + sub.s.Group + "/" + sub.s.filter
}

func (sub *Subscriber) subscribe(ctx context.Context, cm *autopaho.ConnectionManager) error {
	ctx, cancel := context.WithTimeout(ctx, sub.s.DialTimeout)
	defer cancel()
	filter := sub.sharedFilter()
	ack, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	if ack != nil && len(ack.Reasons) == 1 && ack.Reasons[0] >= 0x80 {
		reason := reasonText(ack.Reasons[0])
		if ack.Properties != nil && ack.Properties.ReasonString != "" {
			reason = ack.Properties.ReasonString
		}
		return fmt.Errorf("outboxmqtt: broker refused the subscription %q: reason 0x%02X %s; check the topic filter (Topic, TopicTemplate) and the broker's ACL", filter, ack.Reasons[0], reason)
	}
	if err != nil {
		return outbox.Unavailable(fmt.Errorf("outboxmqtt: subscribing to %q at %s: %w", filter, sub.name, err))
	}
	return nil
}

// Close releases the subscriber. The member's session stays on the broker,
// keeping its share of the group's messages until a subscriber with the
// same Group and Name runs again; Leave ends it. Close does not stop a
// running Run: cancel its context.
func (sub *Subscriber) Close() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.closed = true
	return nil
}

// Leave removes this member from its group for good: it unsubscribes and
// ends the member's persistent session. Messages the broker still held for
// this member are discarded with the session, so call it once Run has
// drained them, when scaling a group down. It must not run while Run does.
func (sub *Subscriber) Leave(ctx context.Context) error {
	sub.mu.Lock()
	if sub.running {
		sub.mu.Unlock()
		return errors.New("outboxmqtt: Leave called while Run is running; cancel Run's context first")
	}
	sub.running = true
	sub.mu.Unlock()
	defer sub.stopRunning()
	o := sub.connOptions(newAckSession(), nil, nil)
	// Clean Start discards the session and its subscription; expiry 0
	// keeps the broker from making a new, empty one that outlives us.
	o.cleanStart, o.sessionExpiry = true, 0
	cm, err := dial(ctx, o)
	if err != nil {
		return err
	}
	disconnect(cm)
	return nil
}

// received is a PUBLISH waiting for the handler, with the generation of the
// connection it came on.
type received struct {
	pub *paho.Publish
	gen uint64
}

// inbox is the queue between paho's receiving goroutine and Run. paho's
// callback must never block: the same goroutine reads the PUBACKs of the
// dead letters Run publishes. The broker sends at most its inflight limit
// of unacked messages, which bounds the queue.
type inbox struct {
	mu     sync.Mutex
	items  []received
	notify chan struct{}
}

func (q *inbox) push(r received) {
	q.mu.Lock()
	q.items = append(q.items, r)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *inbox) pop() (received, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return received{}, false
	}
	r := q.items[0]
	q.items[0] = received{}
	q.items = q.items[1:]
	return r, true
}

// Run consumes the member's messages and calls h for each, one at a time in
// arrival order, until ctx ends; then it lets the handler in hand finish,
// acks its message if it succeeded, disconnects and returns nil.
//
// Each message is decoded with cloudevents.Decode; one that is not an outbox
// event goes to the dead-letter topic at once. A nil error from h sends the
// PUBACK. MQTT has no negative acknowledgement, so on h's error Run calls h
// again after RedeliveryDelay (doubling, up to RedeliveryDelayMax), and at a
// failure that is at least the MaxDeliveries-th, once the message has been
// failing for DeadLetterAfter, publishes it to the dead-letter topic and
// acks it; an error for which outbox.IsPermanent holds goes there at once.
// An error for which outbox.IsUnavailable holds (the handler's database is
// down) pauses the member with the same growing delay and does not count
// toward MaxDeliveries. The member's later messages wait meanwhile. A message
// whose connection was lost before its ack is delivered again by the
// broker, and counted afresh. h gets a context that is not canceled when
// ctx ends, so that the message in hand can finish.
//
// Run reconnects by itself after a broker restart. It returns an error when
// consumption cannot go on: the subscription or a dead letter refused by the
// broker, or a dead letter with no subscriber on its topic (the broker would
// drop it; the message stays unacked).
func (sub *Subscriber) Run(ctx context.Context, h outbox.Handler) error {
	if err := sub.startRun(); err != nil {
		return err
	}
	defer sub.stopRunning()

	sess := newAckSession()
	q := &inbox{notify: make(chan struct{}, 1)}
	fatal := make(chan error, 1)
	var subs sync.WaitGroup
	defer subs.Wait()
	subCtx, cancelSubs := context.WithCancel(context.Background())
	defer cancelSubs()
	o := sub.connOptions(sess, q.onPublish(sess), sub.resubscribe(subCtx, &subs, fatal))
	cm, err := dialUntilUp(ctx, o)
	if cm == nil {
		return err
	}
	defer disconnect(cm)
	defer cancelSubs()
	return sub.consume(ctx, cm, sess, q, fatal, h)
}

// startRun marks the subscriber running, or says why Run cannot start.
func (sub *Subscriber) startRun() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	switch {
	case sub.closed:
		return errors.New("outboxmqtt: Run called on a closed Subscriber")
	case sub.running:
		return errors.New("outboxmqtt: Run called while Run (or Leave) is already running on this Subscriber")
	}
	sub.running = true
	return nil
}

// stopRunning marks the end of Run or Leave.
func (sub *Subscriber) stopRunning() {
	sub.mu.Lock()
	sub.running = false
	sub.mu.Unlock()
}

// onPublish returns paho's callback for a received PUBLISH: it queues the
// message with its connection's generation and never blocks.
func (q *inbox) onPublish(sess *ackSession) func(paho.PublishReceived) (bool, error) {
	return func(pr paho.PublishReceived) (bool, error) {
		q.push(received{pub: pr.Packet, gen: sess.generation()})
		return true, nil
	}
}

// resubscribe returns the callback for each connection: it subscribes in a
// goroutine of subs, until ctx ends, and sends an error that stops Run to
// fatal.
func (sub *Subscriber) resubscribe(ctx context.Context, subs *sync.WaitGroup, fatal chan<- error) func(*autopaho.ConnectionManager, *paho.Connack) {
	return func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
		// Subscribe again on every connection, even when the session was
		// present: mosquitto 2.0 restores sessions and their queued
		// messages from its persistence file after a restart, but not
		// their shared subscriptions. This callback must not block.
		subs.Go(func() {
			if err := sub.subscribe(ctx, cm); err != nil && ctx.Err() == nil && !outbox.IsUnavailable(err) {
				select {
				case fatal <- err:
				default:
				}
			}
		})
	}
}

// dialUntilUp dials until the first connection is up, retrying every second
// while the broker is unavailable: Run is meant to wait for a broker that is
// down, so only ctx bounds the wait, not DialTimeout. It returns a nil
// connection and a nil error once ctx ends.
func dialUntilUp(ctx context.Context, o connOptions) (*autopaho.ConnectionManager, error) {
	for {
		cm, err := dial(ctx, o)
		switch {
		case err == nil:
			return cm, nil
		case ctx.Err() != nil:
			return nil, nil
		case outbox.IsUnavailable(err):
			select {
			case <-ctx.Done():
				return nil, nil
			case <-time.After(time.Second):
			}
		default:
			return nil, err
		}
	}
}

// consume hands the queued messages to h, one at a time, until ctx ends
// (nil) or consumption cannot go on (the error).
func (sub *Subscriber) consume(ctx context.Context, cm *autopaho.ConnectionManager, sess *ackSession, q *inbox, fatal <-chan error, h outbox.Handler) error {
	hctx := context.WithoutCancel(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-fatal:
			return err
		case <-q.notify:
		}
		for ctx.Err() == nil {
			r, ok := q.pop()
			if !ok {
				break
			}
			if err := sub.handle(ctx, hctx, cm, sess, r, h); err != nil {
				return err
			}
		}
	}
}

// handle delivers one message to h (again after failures), then acks it or
// dead-letters and acks it. It returns only errors that stop Run.
func (sub *Subscriber) handle(ctx, hctx context.Context, cm *autopaho.ConnectionManager, sess *ackSession, r received, h outbox.Handler) error {
	if r.gen != sess.generation() {
		return nil // its connection is gone; the broker sends it again
	}
	m, err := cloudevents.Decode(attributes(r.pub), r.pub.Payload)
	if err != nil {
		return sub.deadLetter(ctx, cm, sess, r, err, 0)
	}
	res := sub.s.redelivery.Deliver(0, func() error { return h(hctx, m) },
		func(d time.Duration) bool {
			// Stopping, or the connection lost: leave the message unacked;
			// the broker delivers it again when the member reconnects.
			select {
			case <-ctx.Done():
				return false
			case <-time.After(d):
			}
			return r.gen == sess.generation()
		}, nil)
	switch res.Outcome {
	case redelivery.Handled:
		sess.ackIfCurrent(r.gen, r.pub.Packet())
	case redelivery.DeadLetter:
		return sub.deadLetter(ctx, cm, sess, r, res.Err, res.Deliveries)
	}
	return nil
}

// deadLetter publishes the message as received, with the reason added, to
// the dead-letter topic, waits for the broker's PUBACK and then acks the
// original.
func (sub *Subscriber) deadLetter(ctx context.Context, cm *autopaho.ConnectionManager, sess *ackSession, r received, cause error, deliveries int) error {
	props := &paho.PublishProperties{}
	if r.pub.Properties != nil {
		props.ContentType = r.pub.Properties.ContentType
		for _, u := range r.pub.Properties.User {
			switch u.Key {
			case AttrDeadReason, AttrDeadGroup, AttrDeadDeliveries, AttrDeadTopic:
				continue // from an earlier trip through a dead-letter topic
			}
			props.User = append(props.User, u)
		}
	}
	props.User = append(props.User,
		paho.UserProperty{Key: AttrDeadReason, Value: cause.Error()},
		paho.UserProperty{Key: AttrDeadGroup, Value: sub.s.Group},
		paho.UserProperty{Key: AttrDeadDeliveries, Value: strconv.Itoa(deliveries)},
		paho.UserProperty{Key: AttrDeadTopic, Value: r.pub.Topic},
	)
	pub := &paho.Publish{QoS: 1, Topic: sub.s.deadTopic, Payload: r.pub.Payload, Properties: props}
	for {
		// The dead letter must reach the broker before the ack, even while
		// stopping, so this wait ignores ctx's end (bounded by
		// DialTimeout).
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sub.s.DialTimeout)
		resp, err := cm.Publish(pctx, pub)
		cancel()
		switch {
		case resp != nil && resp.ReasonCode == 0x10:
			return fmt.Errorf("outboxmqtt: dead-letter topic %q has no subscriber, so the broker would drop the message from %q; subscribe to it with a persistent session (e.g. mosquitto_sub -V 5 -c -i outbox-dead -x 86400 -q 1 -t %q) and run again; the message stays unacked",
				sub.s.deadTopic, r.pub.Topic, sub.s.deadTopic)
		case resp != nil && resp.ReasonCode >= 0x80:
			return fmt.Errorf("outboxmqtt: broker refused the dead letter on topic %q: reason 0x%02X %s; the message stays unacked", sub.s.deadTopic, resp.ReasonCode, reasonText(resp.ReasonCode))
		case err == nil:
			sess.ackIfCurrent(r.gen, r.pub.Packet())
			return nil
		case r.gen != sess.generation():
			// The connection is gone: the message was not acked, and the
			// broker delivers it again after the reconnection.
			return nil
		}
		// No answer on a live connection: the message stays in hand (an
		// unacked message is not sent again on the same connection), and
		// the dead letter is sent again.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

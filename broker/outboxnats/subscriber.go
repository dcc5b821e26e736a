package outboxnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox"
)

// maxReasonLen bounds the handler error recorded in a dead letter, so that
// the dead letter stays within the server's max_payload.
const maxReasonLen = 1024

// Subscriber consumes one consumer group's durable JetStream consumer and
// hands each message to a handler. The subscribers of a group, in one
// process or many, share the consumer and so the messages.
type Subscriber struct {
	st      *subscriberSettings
	nc      *nats.Conn
	js      jetstream.JetStream
	cons    jetstream.Consumer
	log     *slog.Logger
	dead    string // the group's dead-letter subject
	running atomic.Bool
	settled *settledSeqs
}

// NewSubscriber validates cfg, connects, and makes sure that the stream (as
// a Publisher would create it), the dead-letter stream and the group's
// durable consumer exist. When it returns, messages published afterwards
// reach the group even before Run is called. A consumer that exists already
// is used as it is, provided its filter subject is the one cfg asks for.
func NewSubscriber(ctx context.Context, cfg SubscriberConfig) (*Subscriber, error) {
	st, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	a := auth{creds: st.Credentials, nkey: st.NKeySeed, tls: st.TLS, own: st.Conn}
	nc, err := connect(ctx, st.url, "outbox subscriber "+st.Group, a, st.DialTimeout)
	if err != nil {
		return nil, err
	}
	s := &Subscriber{st: st, nc: nc, log: st.Logger, dead: st.deadPrefix + st.consumer,
		settled: newSettledSeqs(max(4*st.Prefetch, settledMin))}
	if err := s.setUp(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Subscriber) setUp(ctx context.Context) error {
	st := s.st
	js, err := newJetStream(s.nc, st.Timeout)
	if err != nil {
		return fmt.Errorf("outboxnats: %w", err)
	}
	s.js = js
	ctx, cancel := context.WithTimeout(ctx, 3*st.Timeout)
	defer cancel()
	if _, err := ensureStream(ctx, js, st.stream.streamConfig(), "subjects the group consumes"); err != nil {
		return err
	}
	_, err = ensureStream(ctx, js, jetstream.StreamConfig{
		Name:        st.DeadLetterStream,
		Description: "outbox dead letters (created by outboxnats)",
		Subjects:    []string{st.deadPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Duplicates:  DefaultDuplicates,
	}, "dead-letter subjects")
	if err != nil {
		return err
	}
	s.cons, err = s.ensureConsumer(ctx)
	return err
}

// ensureConsumer looks the group's consumer up and creates it when missing.
// The consumer's MaxDeliver is unlimited: the subscriber counts deliveries
// itself and dead-letters a message once MaxDeliveries is reached, so that a
// message whose last delivery could not be dead-lettered (the connection
// dropped) comes back instead of staying unacknowledged for good.
func (s *Subscriber) ensureConsumer(ctx context.Context) (jetstream.Consumer, error) {
	st := s.st
	deliver := jetstream.DeliverAllPolicy
	if st.DeliverNew {
		deliver = jetstream.DeliverNewPolicy
	}
	want := jetstream.ConsumerConfig{
		Durable:       st.consumer,
		Description:   "outbox consumer group " + strconv.Quote(st.Group),
		FilterSubject: st.filter,
		DeliverPolicy: deliver,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       st.AckWait,
		MaxDeliver:    -1,
	}
	for attempt := 0; ; attempt++ {
		c, err := s.js.Consumer(ctx, st.Stream, st.consumer)
		if err == nil {
			if got := c.CachedInfo().Config.FilterSubject; got != st.filter {
				return nil, fmt.Errorf("outboxnats: consumer %s of stream %s (group %q) exists with filter subject %q, not %q; a group consumes one subject: use another group name, or delete the consumer",
					st.consumer, st.Stream, st.Group, got, st.filter)
			}
			return c, nil
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, jsError(fmt.Sprintf("look up consumer %s of stream %s", st.consumer, st.Stream), err)
		}
		c, err = s.js.CreateConsumer(ctx, st.Stream, want)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, jetstream.ErrConsumerExists) && attempt == 0 {
			continue // created by another subscriber of the group meanwhile
		}
		return nil, jsError(fmt.Sprintf("create consumer %s on stream %s", st.consumer, st.Stream), err)
	}
}

// DeadLetterSubject returns the subject the group's dead letters go to.
func (s *Subscriber) DeadLetterSubject() string { return s.dead }

// Close closes the connection (not SubscriberConfig.Conn, which is the
// caller's); a Run in progress returns an error.
func (s *Subscriber) Close() error {
	if s.st.Conn == nil {
		s.nc.Close()
	}
	return nil
}

// Run consumes the group's messages one at a time and calls h for each,
// until ctx ends; then it lets the handler in hand finish, acks it, gives
// the messages it had fetched ahead back to the broker, and returns nil.
// Only one Run of a Subscriber may be in progress at a time.
//
// A nil error from h is acked with a confirmed ack (the broker answers it)
// before the next message is taken, so that the inbox's commit and the ack
// happen in that order. An error asks for the message again after
// RedeliveryDelay (doubling per delivery, up to RedeliveryDelayMax: a nak
// with that delay); at a failed delivery that is at least the
// MaxDeliveries-th once the message has been failing for DeadLetterAfter,
// or at once for an error wrapped with outbox.Permanent or a message that is
// not an outbox event, the message goes to the dead-letter subject and is
// terminated once the broker acked the dead letter. An error for which
// outbox.IsUnavailable holds (the handler's database is down) is waited
// out with the message in hand: Run pauses with the same growing delay,
// keeps the message in progress, and hands it to h again, without a
// delivery counted.
//
// h's context is not canceled when ctx ends, so that the handler in hand
// can finish. Run returns an error when consumption stops for good: the
// connection was closed, or the consumer was deleted. It survives broker
// restarts: the client reconnects and resumes.
func (s *Subscriber) Run(ctx context.Context, h outbox.Handler) error {
	if h == nil {
		return errors.New("outboxnats: Run needs a handler")
	}
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("outboxnats: Run is already in progress on this Subscriber; build another Subscriber of the group to consume in parallel")
	}
	defer s.running.Store(false)
	if ctx.Err() != nil {
		return nil
	}
	p, err := s.newPull()
	if err != nil {
		return err
	}
	defer func() { p.current().Stop() }()
	// Drain stops fetching but still hands out the messages fetched already,
	// which go back to the broker below.
	stopDrain := context.AfterFunc(ctx, func() { p.current().Drain() })
	defer stopDrain()
	stopAhead := p.ahead.keepAlive(s.st.AckWait / 2)
	defer stopAhead()

	hctx := context.WithoutCancel(ctx)
	for {
		msg, done, err := p.next(ctx)
		if done {
			return err
		}
		if msg == nil {
			continue
		}
		if ctx.Err() != nil {
			// Fetched ahead but not handled: hand it back for another
			// subscriber of the group at once, rather than after AckWait.
			_ = msg.Nak()
			continue
		}
		s.handle(ctx, hctx, msg, h, p.outage)
	}
}

// handle runs h on one message and settles it. ctx is Run's: when it ends
// during an outage pause, the message is handed back. onOutage is called at
// the first outage, before the pause.
func (s *Subscriber) handle(ctx, hctx context.Context, msg jetstream.Msg, h outbox.Handler, onOutage func()) {
	md, err := msg.Metadata()
	if err != nil {
		// Not a JetStream delivery that can be told apart from the next one:
		// terminate it, or it would come back after every AckWait.
		s.log.Error("outboxnats: a message without JetStream metadata; terminated", "group", s.st.Group, "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	if s.settled.has(md.Sequence.Stream) {
		// A copy delivered again while it waited in the prefetch buffer,
		// after its first copy was settled: ack it again (a no-op for the
		// broker, or the ack that got lost) and move on.
		_ = msg.Ack()
		return
	}
	m, err := decodeMessage(msg.Headers(), msg.Data())
	if err != nil {
		s.deadLetter(hctx, msg, md, "", err)
		return
	}
	p := s.st.redelivery
	n := int(min(md.NumDelivered, 1<<20)) //nolint:gosec // G115: bounded
	if prev := n - 1; prev > 0 && p.Exhausted(prev, p.Span(prev)) {
		// The delivery before this one failed for good; dead-lettering it
		// failed, or its ack was lost.
		s.deadLetter(hctx, msg, md, m.MsgID, fmt.Errorf("delivered %d times, the last failed delivery past MaxDeliveries %d and DeadLetterAfter %s", md.NumDelivered, p.MaxDeliveries, p.DeadLetterAfter))
		return
	}
	stop := s.keepAlive(msg)
	// An outage (outbox.IsUnavailable) is waited out here, with the
	// message in hand and kept in progress: a nak would count a delivery.
	for outages := 1; ; outages++ {
		err = h(hctx, m)
		if err == nil || outbox.IsPermanent(err) || !outbox.IsUnavailable(err) {
			break
		}
		if outages == 1 {
			onOutage()
		}
		wait := p.Backoff(outages)
		s.log.Info("outboxnats: handler reports an outage; pausing, the delivery is not counted", "group", s.st.Group,
			"msg_id", m.MsgID, "retry_in", wait, "err", err)
		if !sleep(ctx, wait) {
			stop()
			// Stopping: back to the broker, for the next subscriber.
			_ = msg.NakWithDelay(wait)
			return
		}
	}
	stop()
	switch {
	case err == nil:
		actx, cancel := context.WithTimeout(hctx, s.st.Timeout)
		defer cancel()
		s.settled.add(md.Sequence.Stream)
		if aerr := msg.DoubleAck(actx); aerr != nil {
			// The broker delivers the message again after AckWait; the
			// inbox makes that second delivery harmless.
			s.log.Warn("outboxnats: ack not confirmed; the message will be delivered again", "group", s.st.Group, "msg_id", m.MsgID, "err", aerr)
		}
	case outbox.IsPermanent(err):
		s.deadLetter(hctx, msg, md, m.MsgID, err)
	case p.Exhausted(n, p.Span(n)):
		s.deadLetter(hctx, msg, md, m.MsgID, fmt.Errorf("failed %d deliveries (MaxDeliveries %d, failing for DeadLetterAfter %s), the last with: %w",
			md.NumDelivered, p.MaxDeliveries, p.DeadLetterAfter, err))
	default:
		wait := p.Backoff(n)
		s.log.Debug("outboxnats: handler failed; the message is delivered again", "group", s.st.Group, "msg_id", m.MsgID,
			"deliveries", md.NumDelivered, "retry_in", wait, "err", err)
		_ = msg.NakWithDelay(wait)
	}
}

// redeliveryDelay is the delay of the nak after the delivered-th delivery.
func (s *Subscriber) redeliveryDelay(delivered uint64) time.Duration {
	return s.st.redelivery.Backoff(int(min(delivered, 1<<20))) //nolint:gosec // G115: bounded
}

// sleep waits d, or until ctx ends; it reports whether d passed.
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

// keepAlive tells the broker every AckWait/2 that the handler is still
// working, so that a slow handler does not get its message delivered to
// another subscriber meanwhile.
func (s *Subscriber) keepAlive(msg jetstream.Msg) (stop func()) {
	return inProgressEvery(s.st.AckWait/2, func() []jetstream.Msg { return []jetstream.Msg{msg} })
}

// deadLetter publishes msg to the group's dead-letter subject, waits for the
// PubAck, and then terminates msg. When the dead letter cannot be stored, msg
// is handed back, and its next delivery tries again.
func (s *Subscriber) deadLetter(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, msgID string, reason error) {
	text := reason.Error()
	if len(text) > maxReasonLen {
		text = text[:maxReasonLen] + "..."
	}
	h := make(nats.Header, len(msg.Headers())+5)
	for k, v := range msg.Headers() {
		h[k] = v
	}
	h[headerDeadReason] = []string{encodeValue(text)}
	h[headerDeadGroup] = []string{encodeValue(s.st.Group)}
	h[headerDeadSubject] = []string{msg.Subject()}
	h[headerDeadSequence] = []string{strconv.FormatUint(md.Sequence.Stream, 10)}
	// The dead-letter stream drops a second copy of the same stored message
	// for the same group (a Term that got lost), not the same msg_id
	// dead-lettered by another group.
	h[headerMsgID] = []string{fmt.Sprintf("%s:%d:%s", md.Stream, md.Sequence.Stream, s.st.consumer)}
	pctx, cancel := context.WithTimeout(ctx, s.st.Timeout)
	defer cancel()
	_, err := s.js.PublishMsg(pctx, &nats.Msg{Subject: s.dead, Header: h, Data: msg.Data()})
	if err != nil {
		s.log.Error("outboxnats: could not store a dead letter; the message will be delivered again",
			"group", s.st.Group, "msg_id", msgID, "subject", s.dead, "err", err)
		_ = msg.NakWithDelay(s.redeliveryDelay(md.NumDelivered))
		return
	}
	s.settled.add(md.Sequence.Stream)
	if err := msg.Term(); err != nil {
		s.log.Warn("outboxnats: dead letter stored, but the original was not terminated; it will be dead-lettered again (deduplicated)",
			"group", s.st.Group, "msg_id", msgID, "err", err)
	}
	s.log.Warn("outboxnats: message dead-lettered", "group", s.st.Group, "msg_id", msgID,
		"deliveries", md.NumDelivered, "dead_letter_subject", s.dead, "reason", text)
}

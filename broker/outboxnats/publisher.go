package outboxnats

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
)

// Publisher publishes outbox messages to a JetStream stream, one NATS message
// per row, each acknowledged by a PubAck. It is safe for concurrent use.
type Publisher struct {
	nc       *nats.Conn
	owned    bool // nc is the publisher's own, which Close closes
	js       jetstream.JetStream
	prefix   string // subject prefix, e.g. "outbox."
	stream   string
	source   string // percent-encoded
	redacted string
	headers  *cloudevents.HeaderLog
}

var _ outbox.Publisher = (*Publisher)(nil)

// NewPublisher validates cfg, connects, and makes sure the stream exists:
// it creates cfg.Stream over the subject prefix followed by ">" when the
// stream is missing, and checks that an existing one covers those subjects.
// When the server cannot be reached the error satisfies outbox.IsUnavailable.
func NewPublisher(ctx context.Context, cfg PublisherConfig) (*Publisher, error) {
	st, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	nc, err := connect(ctx, st.url, "outbox publisher", st.auth(), st.DialTimeout)
	if err != nil {
		return nil, err
	}
	owned := cfg.Conn == nil
	release := func() {
		if owned {
			nc.Close()
		}
	}
	js, err := newJetStream(nc, st.Timeout)
	if err != nil {
		release()
		return nil, fmt.Errorf("outboxnats: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, st.Timeout)
	defer cancel()
	_, err = ensureStream(ctx, js, st.streamConfig(), "subjects the publisher writes to")
	if err != nil {
		release()
		return nil, err
	}
	return &Publisher{
		nc:       nc,
		owned:    owned,
		js:       js,
		prefix:   st.prefix,
		stream:   st.Stream,
		source:   encodeValue(st.Source),
		redacted: st.url.redacted,
		headers:  cloudevents.NewHeaderLog(st.Logger, "outboxnats"),
	}, nil
}

// auth is how the publisher connects.
func (st *publisherSettings) auth() auth {
	return auth{creds: st.Credentials, nkey: st.NKeySeed, tls: st.TLS, own: st.Conn}
}

// streamConfig is the stream NewPublisher creates when it is missing.
func (st *publisherSettings) streamConfig() jetstream.StreamConfig {
	storage := jetstream.FileStorage
	if st.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	return jetstream.StreamConfig{
		Name:        st.Stream,
		Description: "outbox messages (created by outboxnats)",
		Subjects:    []string{st.prefix + ">"},
		Storage:     storage,
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      max(st.MaxAge, 0),
		Duplicates:  st.Duplicates,
	}
}

// Subject returns the subject a message of topic is published to.
func (p *Publisher) Subject(topic string) string { return p.prefix + topic }

// Close closes the connection. Publish fails with outbox.Unavailable after it.
func (p *Publisher) Close() error {
	if p.owned {
		p.nc.Close()
	}
	return nil
}

// Publish sends every message of the batch with PublishMsgAsync, then waits
// for each PubAck, and returns one error per message, in order, or nil when
// the stream stored them all. A PubAck that says Duplicate (the msg_id was
// stored within the stream's duplicate window) counts as success.
//
// Errors that satisfy outbox.IsUnavailable (the relay pauses and the message
// keeps its retries): the connection is down or reconnecting, no PubAck
// within Timeout, no stream answering for the subject (a stream that was
// removed cannot be told from JetStream restarting), a 5xx answer from
// JetStream (not ready, storage exhausted), ctx ended. A message that NATS
// cannot carry is not sent, and its error, a *cloudevents.LimitError,
// satisfies outbox.IsUndeliverable (the relay makes it DEAD at once): a topic
// that makes an invalid subject (white space, a control character, an empty
// token, a wildcard) or one over 3936 bytes (the server's max_control_line
// of 4096 less the rest of the line), a message over the server's
// max_payload. A refusal spends a retry: a 4xx answer from the stream (e.g.
// over its max_msg_size).
//
// Messages are sent in slice order over one connection, so the stream stores
// a batch in order. A batch with several messages of one key goes in waves
// (outbox.PublishWaves): a key's next message is sent once the PubAck of its
// previous one came, since the stream stores a message sent after a refused
// one. When a message with a key fails, the later messages of its key in the
// batch get outbox.ErrHeldBack.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	return outbox.PublishWaves(ctx, msgs, p.publish)
}

// publish sends msgs, pipelined, then waits for their PubAcks. No key
// appears twice in msgs (a wave of PublishWaves).
func (p *Publisher) publish(ctx context.Context, msgs []outbox.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	errs := make([]error, len(msgs))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = outbox.Unavailable(fmt.Errorf("outboxnats: publish to %s: %w", p.redacted, err))
		}
		return errs
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	var down error // once the connection fails, the rest of the batch is not tried
	for i := range msgs {
		m := &msgs[i]
		if down != nil {
			errs[i] = down
			continue
		}
		if err := ctx.Err(); err != nil {
			errs[i] = outbox.Unavailable(fmt.Errorf("outboxnats: publish to %s: %w", p.redacted, err))
		} else {
			futures[i], errs[i] = p.send(m)
		}
		if errs[i] != nil && outbox.IsUnavailable(errs[i]) {
			down = errs[i]
		}
	}
	for i := range msgs {
		f := futures[i]
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = p.ackError(&msgs[i], err)
		case <-ctx.Done():
			errs[i] = outbox.Unavailable(fmt.Errorf("outboxnats: waiting for the PubAck of %q: %w", msgs[i].MsgID, ctx.Err()))
		}
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// maxSubject is the most bytes of a subject the publisher sends. A NATS
// server reads the HPUB line (the subject, the reply inbox and the sizes)
// into a buffer of max_control_line bytes, 4096 by default, and closes the
// connection on a longer line; the rest of the line takes less than 160.
const maxSubject = 4096 - 160

// send hands one message to the connection.
func (p *Publisher) send(m *outbox.Message) (jetstream.PubAckFuture, error) {
	subject := p.prefix + m.Topic
	if err := checkSubject(subject); err != nil {
		return nil, cloudevents.Undeliverable("NATS", m, fmt.Sprintf("subject %q (from topic %q)", subject, m.Topic),
			fmt.Sprintf("%v; use topics of dot-separated words", err))
	}
	if reason := cloudevents.BytesProblem(subject, maxSubject, "a subject (the server's max_control_line is 4096 by default)"); reason != "" {
		return nil, cloudevents.Undeliverable("NATS", m, "subject", reason)
	}
	msg := &nats.Msg{Subject: subject, Header: eventHeader(m, p.source), Data: m.Payload}
	if size, limit := len(m.Payload)+headerSize(msg.Header), p.nc.MaxPayload(); limit > 0 && int64(size) > limit {
		return nil, cloudevents.Undeliverable("NATS", m, "payload and headers",
			fmt.Sprintf("are %d bytes, over the server's max_payload of %d bytes", size, limit))
	}
	p.headers.Check(m)
	f, err := p.js.PublishMsgAsync(msg)
	if err == nil {
		return f, nil
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		return nil, cloudevents.Undeliverable("NATS", m, "payload and headers",
			fmt.Sprintf("are over the server's max_payload of %d bytes: %v", p.nc.MaxPayload(), err))
	}
	if errors.Is(err, nats.ErrBadSubject) {
		return nil, cloudevents.Undeliverable("NATS", m, fmt.Sprintf("subject %q", subject), err.Error())
	}
	if errors.Is(err, nats.ErrReconnectBufExceeded) {
		// With no reconnect buffer, this is how the client says that it is
		// reconnecting.
		return nil, outbox.Unavailable(fmt.Errorf("outboxnats: publish %q: the connection to %s is down and reconnecting: %w", m.MsgID, p.redacted, err))
	}
	return nil, outbox.Unavailable(fmt.Errorf("outboxnats: publish %q to %s: %w", m.MsgID, p.redacted, err))
}

// ackError classifies a failed PubAck.
func (p *Publisher) ackError(m *outbox.Message, err error) error {
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return outbox.Unavailable(fmt.Errorf("outboxnats: message %q: no stream answered on subject %q (is stream %s there, and JetStream up?): %w",
			m.MsgID, p.prefix+m.Topic, p.stream, err))
	}
	err = fmt.Errorf("outboxnats: message %q: %w", m.MsgID, err)
	if unavailableErr(err) {
		return outbox.Unavailable(err)
	}
	return fmt.Errorf("%w (refused by stream %s)", err, p.stream)
}

func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

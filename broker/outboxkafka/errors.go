package outboxkafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox"
)

// ErrHeldBack marks a message that was not produced because an earlier message
// with the same key in the same Publish call failed before it could be sent.
// It is outbox.ErrHeldBack: the relay leaves the message untouched.
var ErrHeldBack = outbox.ErrHeldBack

// ErrTooLarge marks a message refused because its record cannot fit in a
// record batch of MaxMessageBytes; it was not sent. It wraps
// kerr.MessageTooLarge. Publish returns it wrapped with outbox.Undeliverable.
var ErrTooLarge = fmt.Errorf("outboxkafka: record larger than the producer's MaxMessageBytes: %w", kerr.MessageTooLarge)

// ErrRefusedLogin marks a client the brokers refused at start-up for its
// credentials: a wrong user, password or token, or a SASL mechanism they do
// not take (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM,
// ILLEGAL_SASL_STATE). NewPublisher and NewSubscriber return it wrapping
// the Kafka error; it is not outbox.Unavailable, as trying again with the
// same credentials cannot help. Its message never contains the password or
// token. Once a publisher is running, the same refusal of a record is
// outbox.Unavailable instead (see Publish).
var ErrRefusedLogin = errors.New("outboxkafka: the broker refused the login")

// isAuthError reports whether err is a Kafka refusal of the client's SASL
// login.
func isAuthError(err error) bool {
	return errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.IllegalSaslState) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism)
}

// classify turns the error franz-go reported for one record into the error
// Publish returns: outbox.Unavailable when the broker could not be reached
// or gave no answer in time, a plain error when it refused the record.
//
// The producer retries without limit (kgo's default RecordRetries), so a
// Kafka error code that reaches a record is one franz-go chose not to retry:
// a non-retriable code, or a retriable one it gives up on at once
// (CORRUPT_MESSAGE, a missing topic after its lookups). Such a code is a
// refusal of the record, which spends one of the message's retries, whatever
// Kafka's retriable flag says; otherwise the relay would pause and publish
// the same message again for ever. Only the codes of clusterUnavailable,
// and a client the brokers reject, are outbox.Unavailable.
func classify(err error, topic string, lastConn *connState) error {
	if err == nil {
		return nil
	}
	var ke *kerr.Error
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outbox.Unavailable(fmt.Errorf("outboxkafka: no ack for topic %q before the context ended%s: %w", topic, lastConn.suffix(), err))
	case errors.Is(err, kgo.ErrClientClosed):
		return outbox.Unavailable(fmt.Errorf("outboxkafka: the publisher was closed before the ack: %w", err))
	case errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries), errors.Is(err, kgo.ErrMaxBuffered):
		return outbox.Unavailable(fmt.Errorf("outboxkafka: topic %q%s: %w", topic, lastConn.suffix(), err))
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		// Retriable for Kafka, but after franz-go's retries it means the topic
		// is missing: a matter of this message's destination, not of the broker.
		return fmt.Errorf("%w: %q; create it, or fix the row's topic or the Destination template: %w", ErrUnknownTopic, topic, err)
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed),
		errors.Is(err, kerr.IllegalSaslState), errors.Is(err, kerr.UnsupportedSaslMechanism):
		// After start-up (NewPublisher returns ErrRefusedLogin instead):
		// every message fails alike until the credentials are fixed, so
		// pause the relay rather than spend the messages' retries.
		return outbox.Unavailable(fmt.Errorf("outboxkafka: the broker refused this client (check the URL's user, password and sasl mechanism, and the IDEMPOTENT_WRITE permission): %w", err))
	case clusterUnavailable(err):
		return outbox.Unavailable(fmt.Errorf("outboxkafka: topic %q: the cluster cannot take writes now%s: %w", topic, lastConn.suffix(), err))
	case errors.As(err, &ke):
		return fmt.Errorf("outboxkafka: the broker refused the record for topic %q: %w", topic, err)
	case isConnectionError(err):
		return outbox.Unavailable(fmt.Errorf("outboxkafka: topic %q: %w", topic, err))
	}
	return fmt.Errorf("outboxkafka: topic %q: %w", topic, err)
}

// clusterUnavailable reports the Kafka error codes that say the cluster
// cannot take a write right now, whatever the record: no leader or no
// in-sync replicas for the partition, a broker down, timing out or failing
// its disk. franz-go retries them itself, so they reach a record only if a
// later franz-go (or a retry limit) hands them over; the message is not at
// fault then, and spending its retries would dead-letter good messages.
func clusterUnavailable(err error) bool {
	for _, ke := range []*kerr.Error{
		kerr.NotEnoughReplicas,            // fewer in-sync replicas than min.insync.replicas
		kerr.NotEnoughReplicasAfterAppend, // written by the leader, not by enough replicas
		kerr.LeaderNotAvailable,           // a leader election is under way
		kerr.NotLeaderForPartition,        // the metadata is behind a leader move
		kerr.BrokerNotAvailable,
		kerr.ReplicaNotAvailable,
		kerr.RequestTimedOut, // the replicas did not ack within the request's timeout
		kerr.NetworkException,
		kerr.KafkaStorageError, // the leader's log directory failed
	} {
		if errors.Is(err, ke) {
			return true
		}
	}
	return false
}

// isConnectionError reports whether err is a network failure.
func isConnectionError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// connState remembers the latest failed connection attempt, so that a record
// that times out waiting for a broker can say why (franz-go retries
// connections by itself and reports only the context's end to the record).
type connState struct {
	last atomic.Pointer[connFailure]
}

type connFailure struct {
	addr string
	err  error
	at   time.Time
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (s *connState) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		s.last.Store(nil)
		return
	}
	s.last.Store(&connFailure{addr: net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port)), err: err, at: time.Now()})
}

func (s *connState) suffix() string {
	if s == nil {
		return ""
	}
	f := s.last.Load()
	if f == nil || time.Since(f.at) > time.Minute {
		return ""
	}
	return fmt.Sprintf(" (last connection attempt to %s: %v)", f.addr, f.err)
}

var _ kgo.HookBrokerConnect = (*connState)(nil)

// Package brokertest is the conformance suite that every broker adapter
// (publisher and subscriber) passes against its real broker: the broker
// adapters' counterpart of drivertest.
//
// An adapter's test calls Run with an Env that builds, per test, a Bundle on
// a fresh destination (a topic, stream, exchange and queue of its own), and
// Features that say what the broker cannot do. The suite publishes through
// the adapter's outbox.Publisher and consumes through its subscriber, and
// checks the wire format (every CloudEvents attribute) and the subscriber contract of outbox.Handler: every
// message acked only after the handler succeeds (a subscriber stopped or
// killed before its handler succeeded leaves the message to its group),
// redelivered after a handler error, dead-lettered after the delivery limit,
// consumer groups, graceful stop, an unreachable broker reported as
// outbox.Unavailable. Effect-once is not checked here: it is the inbox's
// job, tested end to end with a real inbox in e2e.
package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

// MaxDeliveries is the delivery limit the suite's subscribers are built with.
const MaxDeliveries = 3

// Features says what a broker (or its adapter) can do. For what it cannot,
// the suite checks the weaker guarantee that still holds (every message
// arrives; a failing message blocks nothing) and logs what it left unchecked.
type Features struct {
	// Ordered: messages with the same key that one Publish call sends reach
	// a single subscriber in the order of the batch.
	Ordered bool
	// Dedup: the broker drops a second publish of a msg_id it has already
	// stored (within its window), so the handler sees it once.
	Dedup bool
	// DeadLetter: after MaxDeliveries failed deliveries, or one delivery that
	// failed with outbox.Permanent, the message goes to the broker's
	// dead-letter path, which Bundle.DeadLetters reads.
	DeadLetter bool
	// SharedGroup: two subscribers of one group share the messages, each
	// message going to one of them.
	SharedGroup bool
	// HandOver: the messages a subscriber received and did not ack go, once
	// it stops, to another subscriber of its group that is already running
	// (a rebalance, a requeue, a redelivery after the ack wait or the idle
	// time). Without it, the suite checks the weaker guarantee that still
	// holds: a subscriber of the group made after the stopped one's Run
	// returned receives them. That is MQTT's case: an unacked message stays
	// in the stopped member's persistent session, and only a subscriber that
	// resumes the session (same Group and Name, as a restarted process would
	// be, and as the adapter's Bundle.NewSubscriber must then hand out) gets
	// it again.
	HandOver bool
}

// Env builds the adapter under test.
type Env struct {
	Features Features
	// Setup returns a Bundle on a destination no other test uses. It
	// registers its own clean-up with t.Cleanup.
	Setup func(t *testing.T) *Bundle
	// Timeout bounds each wait for deliveries. Defaults to 30s.
	Timeout time.Duration
}

// SubscriberOptions configures one subscriber the suite asks for.
type SubscriberOptions struct {
	// Group is the consumer group (a Kafka group, a RabbitMQ queue, a
	// JetStream durable, a Redis consumer group, an MQTT shared subscription).
	Group string
	// MaxDeliveries is the delivery limit before the dead-letter path. The
	// adapter builds the subscriber with short redelivery delays and no
	// least span before dead-lettering (DeadLetterAfter), so that the suite
	// sees the message dead-lettered at exactly this delivery; RunBackoff
	// checks the delays and the span.
	MaxDeliveries int
	// RedeliverAfter, when not zero, asks for a subscriber whose broker
	// gives a message it delivered, and that nobody acked because its
	// subscriber went away without a word, to the group again within about
	// this long: JetStream's AckWait, Redis Streams' MinIdle (an adapter
	// whose test default is shorter keeps it). Adapters whose broker
	// notices a gone subscriber by itself (a closed connection, a group
	// rebalance, a resumed session) ignore it. Zero leaves the adapter's
	// test default.
	RedeliverAfter time.Duration
}

// Subscriber is what the suite needs of an adapter's subscriber.
type Subscriber interface {
	// Run consumes and calls h until ctx is done; then it lets the handler
	// in hand finish, acks what succeeded, and returns nil.
	Run(ctx context.Context, h outbox.Handler) error
}

// Bundle is one test's view of the adapter, on its own destination.
type Bundle struct {
	// Publisher publishes to the destination.
	Publisher outbox.Publisher
	// Topic is the topic of the messages the suite writes: the publisher
	// routes it to this bundle's destination.
	Topic string
	// NewSubscriber returns a subscriber of the destination. When it returns,
	// the group's subscription exists, so that messages published afterwards
	// reach the group even before Run is called.
	NewSubscriber func(t *testing.T, opts SubscriberOptions) Subscriber
	// Unreachable returns a publisher configured like Publisher but pointed at
	// an address where no broker listens. An adapter whose constructor checks
	// the connection (as the adapters here do) builds it against a broker of
	// its own (a private instance, or a TCP proxy) and then stops that.
	Unreachable func(t *testing.T) outbox.Publisher
	// Refused returns a message this broker refuses (too large, unroutable,
	// an invalid destination): Publish must fail it without failing its
	// neighbours, with an error that is not outbox.Unavailable. Required.
	Refused func() outbox.Message
	// Undeliverable returns messages this transport can never carry (a field
	// over one of its size limits, a character it refuses), as a row inserted
	// by plain SQL, past the Writer's checks, may hold them. Publish must
	// fail each with an error satisfying outbox.IsUndeliverable, without
	// sending it, without failing its neighbours and without breaking the
	// connection. nil when the transport carries every row (the suite logs
	// that).
	Undeliverable func() []outbox.Message
	// DeadLetters returns the messages on the dead-letter path of the group,
	// as the broker holds them now. Required when Features.DeadLetter.
	DeadLetters func(ctx context.Context, group string) ([]outbox.Message, error)
	// Kill stops sub the way a crash would: it cuts the subscriber's
	// connections to the broker at once, without letting the handler in hand
	// finish and without acking anything. sub's Run may then return an
	// error, at once or when its handler returns. Optional: nil when the
	// adapter has no such stop (the suite then logs that the crash case went
	// unchecked; the graceful stop of an unfinished handler is checked for
	// every adapter).
	Kill func(sub Subscriber)
}

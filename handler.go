package outbox

import (
	"context"
	"fmt"
)

// Handler applies one message a subscriber received from a broker. The message
// carries what the relay published: MsgID, Topic, Key, Payload, Headers and
// CreatedAt (the row's fields a broker does not carry stay zero).
//
// A nil error acks the delivery. Any other error asks for the message again:
// the subscriber delivers it again after a growing delay (RedeliveryDelay,
// doubling up to RedeliveryDelayMax), and moves it to the broker's
// dead-letter path only once it has failed MaxDeliveries times and for at
// least DeadLetterAfter; those fields have the same names in every
// subscriber's config. An error wrapped with Permanent goes to the
// dead-letter path at once.
//
// An error that satisfies IsUnavailable (made with DatabaseUnavailable or
// Unavailable) says that something the handler needs, such as its own
// database, cannot be reached: an outage, not a bad message. The subscriber
// then pauses: it takes no new message, waits with the same growing delay,
// and hands the same message to the handler again, without counting the
// failure toward MaxDeliveries or dead-lettering it. A Handler made with
// Inbox.Handler returns such an error when the drivers report the database
// unreachable; a hand-written Handler should wrap its own connection errors
// with DatabaseUnavailable.
//
// Delivery is at least once, so the same message may reach a Handler twice:
// build it with Inbox.Handler, or make its effect idempotent another way (see
// the idempotency helpers in the package documentation).
type Handler func(ctx context.Context, m Message) error

// Handler returns a Handler that applies each message through the inbox for
// group: fn runs in one transaction together with the (group, msg_id) record,
// and a message the group has already processed is acked without running fn.
// When fn fails nothing is recorded, and the error goes back to the
// subscriber, which asks for the message again. When the database cannot be
// reached the error satisfies IsUnavailable, and the subscriber pauses
// instead of counting the delivery. A msg_id the inbox cannot
// record (empty, or longer than 64 characters) fails with a Permanent error.
//
// Handler panics when group is not a name the inbox can record (empty,
// longer than 64 characters, not UTF-8): checked per message, that mistake
// of configuration would send every message to the dead-letter path.
func (ib *Inbox[TTx]) Handler(group string, fn func(ctx context.Context, tx TTx, m Message) error) Handler {
	if reason := checkText(group, MaxGroupLen, true); reason != "" {
		panic(fmt.Sprintf("outbox: Inbox.Handler: consumer group %q: %s", group, reason))
	}
	return func(ctx context.Context, m Message) error {
		if err := ValidateConsumer(group, m.MsgID); err != nil {
			return Permanent(err)
		}
		_, err := ib.Process(ctx, group, m.MsgID, func(ctx context.Context, tx TTx) error {
			return fn(ctx, tx, m)
		})
		return err
	}
}

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
// the subscriber nacks it or lets the broker redeliver it, up to its delivery
// limit, and then moves it to the broker's dead-letter path. An error wrapped
// with Permanent goes to the dead-letter path at once.
//
// Delivery is at least once, so the same message may reach a Handler twice:
// build it with Inbox.Handler, or make its effect idempotent another way (see
// the idempotency helpers in the package documentation).
type Handler func(ctx context.Context, m Message) error

// Handler returns a Handler that applies each message through the inbox for
// group: fn runs in one transaction together with the (group, msg_id) record,
// and a message the group has already processed is acked without running fn.
// When fn fails nothing is recorded, and the error goes back to the
// subscriber, which asks for the message again. A msg_id the inbox cannot
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

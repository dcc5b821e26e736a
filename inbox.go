package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/outbox-go/outbox/outboxdriver"
)

// Inbox applies a received message at most once per consumer group: it records
// (group, msg_id) in the consumed_msg table in the same transaction as the
// consumer's own change. With at-least-once delivery that gives an effect
// exactly once.
type Inbox[TTx any] struct {
	driver outboxdriver.InboxStore[TTx]
}

// NewInbox returns an Inbox that works through driver.
func NewInbox[TTx any](driver outboxdriver.InboxStore[TTx]) *Inbox[TTx] {
	return &Inbox[TTx]{driver: driver}
}

// Process runs fn in a new transaction together with the inbox record for
// (group, msgID). When the message was already processed, fn does not run and
// Process returns applied=false with a nil error: the caller should ack the
// delivery. When fn fails, nothing is recorded and its error is returned: the
// caller should not ack, so that the broker redelivers. When the database
// cannot be reached (connection refused or reset, the server shutting down,
// a pool that cannot connect), the driver's error satisfies IsUnavailable.
func (ib *Inbox[TTx]) Process(ctx context.Context, group, msgID string, fn func(ctx context.Context, tx TTx) error) (applied bool, err error) {
	if err := ValidateConsumer(group, msgID); err != nil {
		return false, err
	}
	err = ib.driver.RunInTx(ctx, func(ctx context.Context, tx TTx) error {
		fresh, err := ib.driver.MarkConsumedTx(ctx, tx, group, msgID)
		if err != nil {
			return err
		}
		if !fresh {
			return errAlreadyConsumed
		}
		return fn(ctx, tx)
	})
	switch {
	case errors.Is(err, errAlreadyConsumed):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// MarkTx records (group, msgID) in the caller's transaction and reports whether
// it is new. A false result means the message was already processed: skip the
// change and ack. The transaction stays usable either way.
func (ib *Inbox[TTx]) MarkTx(ctx context.Context, tx TTx, group, msgID string) (fresh bool, err error) {
	if err := ValidateConsumer(group, msgID); err != nil {
		return false, err
	}
	return ib.driver.MarkConsumedTx(ctx, tx, group, msgID)
}

var errAlreadyConsumed = fmt.Errorf("outbox: already consumed")

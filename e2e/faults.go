package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// crashingPublisher publishes through Publisher; after `after` batches it
// publishes one more batch for real, reports it as unavailable (the relay
// leaves the rows NEW, as if it had died before marking them) and stops the
// relay.
type crashingPublisher struct {
	outbox.Publisher
	after   int64
	crash   func()
	batches atomic.Int64
	lost    atomic.Int64
	crashed atomic.Bool
	lostIDs []string // the batch it died on; read after the relay stopped
}

func (c *crashingPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := c.Publisher.Publish(ctx, msgs)
	if c.batches.Add(1) <= c.after || c.crashed.Load() {
		return errs
	}
	for _, err := range errs {
		if err != nil {
			return errs // not a clean crash point; try the next batch
		}
	}
	c.crashed.Store(true)
	c.lost.Store(int64(len(msgs)))
	for _, m := range msgs {
		c.lostIDs = append(c.lostIDs, m.MsgID)
	}
	c.crash()
	out := make([]error, len(msgs))
	for i := range out {
		out[i] = outbox.Unavailable(errors.New("e2e: relay died between publish and mark"))
	}
	return out
}

func closeIfCloser(v any) {
	if c, ok := v.(io.Closer); ok {
		_ = c.Close()
	}
}

// refusingPublisher publishes through Publisher, except that the broker
// refuses the first attempt of every 25th message from refuseAt (an error
// that is not Unavailable: the relay must spend a retry and try it again,
// not mark it SENT); it is not published. The later messages of its key in
// the batch are held back (ErrHeldBack), unpublished, as a real publisher
// does.
type refusingPublisher struct {
	outbox.Publisher
	h       *harness
	refused atomic.Int64
}

func (p *refusingPublisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := make([]error, len(msgs))
	var pass []outbox.Message
	var at []int
	var failedKeys map[string]string
	for i, m := range msgs {
		if first, held := failedKeys[m.Key]; held && m.Key != "" {
			errs[i] = fmt.Errorf("%w (msg_id %q was refused first)", outbox.ErrHeldBack, first)
			continue
		}
		if p.h.refusals.due(m.MsgID, refuseAt) {
			p.refused.Add(1)
			errs[i] = errors.New("e2e: injected refusal by the broker")
			if failedKeys == nil {
				failedKeys = map[string]string{}
			}
			failedKeys[m.Key] = m.MsgID
			continue
		}
		pass = append(pass, m)
		at = append(at, i)
	}
	if len(pass) > 0 {
		for j, err := range p.Publisher.Publish(ctx, pass) {
			errs[at[j]] = err
		}
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// beforeCommitKey keys, in a handler's context, a function that the
// consumer's transaction calls after its inbox record and its change, just
// before its commit: the chaos run's crash of the subscriber waits there.
type beforeCommitKey struct{}

// faultyInbox is the consumer's driver, except that the transaction that
// records the first delivery of every 25th message from failCommitAt fails
// at its commit, after the inbox record and the change were written: both
// must be rolled back together, and the redelivery must apply the message.
type faultyInbox struct {
	outboxdriver.Driver[*sql.Tx]
	h       *harness
	mu      sync.Mutex
	pending map[*sql.Tx]string // transactions to fail at their commit
	done    map[string]bool
}

func (d *faultyInbox) MarkConsumedTx(ctx context.Context, tx *sql.Tx, group, msgID string) (bool, error) {
	fresh, err := d.Driver.MarkConsumedTx(ctx, tx, group, msgID)
	if err == nil && fresh && msgNumber(msgID)%25 == failCommitAt {
		d.mu.Lock()
		if !d.done[msgID] {
			d.pending[tx] = msgID
		}
		d.mu.Unlock()
	}
	return fresh, err
}

func (d *faultyInbox) RunInTx(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	return d.Driver.RunInTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		err := fn(ctx, tx)
		if hook, ok := ctx.Value(beforeCommitKey{}).(func()); ok && err == nil {
			hook()
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		id, ok := d.pending[tx]
		delete(d.pending, tx)
		if ok && err == nil && !d.done[id] {
			if d.done == nil {
				d.done = map[string]bool{}
			}
			d.done[id] = true
			d.h.commitFailed.Add(1)
			return errors.New("e2e: injected failure of the consumer's commit")
		}
		return err
	})
}

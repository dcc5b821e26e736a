package sqlstore

import (
	"context"
	"fmt"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// claimRange claims in one short write transaction: expired claims are
// dropped first (which also takes SQLite's write lock at once, so the
// transaction never has to upgrade), then the due rows outside every live
// claim are read and this claim's id range is recorded with its lease.
func (s *Store) claimRange(ctx context.Context, p outboxdriver.ClaimParams) (outboxdriver.Claim, error) {
	if p.Lease <= 0 {
		return nil, fmt.Errorf("outbox: claim: a %s store needs a positive lease", s.c.name)
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, s.wrap("claim: begin", err)
	}
	fail := func(op string, err error) (outboxdriver.Claim, error) {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, s.wrap(op, err)
	}
	if _, err := tx.Exec(ctx, s.c.ClaimExpire); err != nil {
		return fail("claim: expire", err)
	}
	rows, err := tx.Query(ctx, s.c.Claim, p.AfterID, p.Limit)
	if err != nil {
		return fail("claim", err)
	}
	msgs, err := scanClaimed(rows, s.c.claimReturnsDue, p.Limit, nil)
	if err != nil {
		return fail("claim", err)
	}
	c := &rangeClaim{s: s, msgs: msgs}
	if len(msgs) > 0 {
		c.token = newToken()
		if _, err := tx.Exec(ctx, s.c.ClaimRecord, c.token, msgs[0].ID, msgs[len(msgs)-1].ID, p.Lease.Milliseconds()); err != nil {
			return fail("claim: record", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, s.wrap("claim: commit", err)
	}
	return c, nil
}

// rangeClaim holds the ids from its first to its last message until it is
// finished, aborted, or its lease runs out. A relay that outlives its lease
// may mark rows another relay has claimed since; every mark is guarded by
// status = 0, so status still only moves forward, and the consumers' inbox
// absorbs the second delivery.
type rangeClaim struct {
	s     *Store
	msgs  []outbox.Message
	token string
	done  bool
}

func (c *rangeClaim) Messages() []outbox.Message { return c.msgs }

func (c *rangeClaim) Finish(ctx context.Context, outcomes []outbox.Outcome) (err error) {
	if c.done {
		return fmt.Errorf("outbox: claim already finished")
	}
	c.done = true
	if len(c.msgs) == 0 {
		return nil
	}
	defer func() {
		if err != nil && c.token != "" {
			giveUp(ctx, c.release)
		}
	}()
	sent, others, err := split(c.msgs, outcomes, false)
	if err != nil {
		return err
	}
	tx, err := c.s.db.Begin(ctx)
	if err != nil {
		return c.s.wrap("finish: begin", err)
	}
	fail := func(op string, err error) error {
		tx.Rollback(context.WithoutCancel(ctx))
		return c.s.wrap(op, err)
	}
	if len(sent) > 0 {
		q, args := c.s.c.markSentArgs(sent, c.token, nil, false)
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return fail("mark sent", err)
		}
	}
	if len(others) > 0 {
		q, args := c.s.c.markOthersArgs(others, c.token)
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return fail("mark failed", err)
		}
	}
	if _, err := tx.Exec(ctx, c.s.c.ClaimRelease, c.token); err != nil {
		return fail("finish: release claim", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return c.s.wrap("finish: commit", err)
	}
	c.s.releaseAfterMark(ctx, c.msgs, outcomes)
	return nil
}

func (c *rangeClaim) Abort(ctx context.Context) error {
	if c.done || c.token == "" {
		c.done = true
		return nil
	}
	c.done = true
	return c.release(ctx, "abort claim")
}

func (c *rangeClaim) release(ctx context.Context, op string) error {
	_, err := c.s.db.Exec(ctx, c.s.c.ClaimRelease, c.token)
	return c.s.wrap(op, err)
}

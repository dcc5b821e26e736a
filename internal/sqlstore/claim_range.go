package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// rangeClaimer is SQLite's claim design: in one short write transaction,
// read the due rows outside every live claim's id range and record this
// claim's range with a lease; mark later, and drop the claim.
type rangeClaimer struct {
	// rescan and byIDs are Claim and ClaimIDs.
	rescan, byIDs string
	// expire, record and sent are ClaimExpire, ClaimRecord and MarkSent.
	expire, record, sent string
}

// claimRange is the design of rangeClaimer.
var claimRange = claimDesign{need: "range", build: func(st *statements) claimer {
	return &rangeClaimer{rescan: st.Claim, byIDs: st.ClaimIDs,
		expire: st.ClaimExpire, record: st.ClaimRecord, sent: st.MarkSent}
}}

// claim claims in one short write transaction: expired claims are dropped
// first (which also takes SQLite's write lock at once, so the transaction
// never has to upgrade), then the due rows outside every live claim are
// read and this claim's id range is recorded with its lease.
func (k *rangeClaimer) claim(ctx context.Context, s *Store, p outboxdriver.ClaimParams) (outboxdriver.Claim, error) {
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
	if _, err := tx.Exec(ctx, k.expire); err != nil {
		return fail("claim: expire", err)
	}
	rows, err := tx.Query(ctx, k.rescan, p.AfterID, p.Limit)
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
		if _, err := tx.Exec(ctx, k.record, c.token, msgs[0].ID, msgs[len(msgs)-1].ID, p.Lease.Milliseconds()); err != nil {
			return fail("claim: record", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, s.wrap("claim: commit", err)
	}
	return c, nil
}

// claimIDs is claim for the rows of ids: the claim records the range from
// the first to the last id it took.
func (k *rangeClaimer) claimIDs(ctx context.Context, s *Store, ids []int64, lease time.Duration) (outboxdriver.Claim, error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, s.wrap("claim by id: begin", err)
	}
	fail := func(op string, err error) (outboxdriver.Claim, error) {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, s.wrap(op, err)
	}
	if _, err := tx.Exec(ctx, k.expire); err != nil {
		return fail("claim by id: expire", err)
	}
	q, args := withIDList(k.byIDs, nil, ids)
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return fail("claim by id", err)
	}
	msgs, err := scanClaimed(rows, false, len(ids), nil)
	if err != nil {
		return fail("claim by id", err)
	}
	c := &rangeClaim{s: s, msgs: msgs}
	if len(msgs) > 0 {
		c.token = newToken()
		if _, err := tx.Exec(ctx, k.record, c.token, msgs[0].ID, msgs[len(msgs)-1].ID, lease.Milliseconds()); err != nil {
			return fail("claim by id: record", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, s.wrap("claim by id: commit", err)
	}
	return c, nil
}

// markSent takes the ids in a JSON array.
func (k *rangeClaimer) markSent(ids []int64, _ string, _ []string, _ bool) (string, []any) {
	return k.sent, []any{jsonArray(ids)}
}

func (k *rangeClaimer) sentDropsLease() bool { return false }

// explain plans the rescan: the design claims from a cursor with it too.
func (k *rangeClaimer) explain() []explained { return explainClaims(k.rescan, "") }

// overlap: the claims and marks take SQLite's one write lock (and hold no
// connection in between), so a claim goes only beside a publish.
func (k *rangeClaimer) overlap() outboxdriver.ClaimOverlap { return outboxdriver.OverlapPublish }

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
		q, args := c.s.c.claimer.markSent(sent, c.token, nil, false)
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

package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// leaseClaim is a batch held by a lease, recorded under token (PostgreSQL:
// the chunks of its rows; MySQL: its rows). Finish marks
// in a transaction of its own. The SENT mark applies to rows still NEW
// whether or not the lease still holds (the messages went out); the other
// outcomes only to rows the lease still holds, so that a relay that
// outlived its lease cannot undo or shorten another relay's claim.
type leaseClaim struct {
	s     *Store
	msgs  []outbox.Message
	ctids []string // PostgreSQL: each message's ctid, as the claim read it
	token string
	// prevToken and prevLast are the token and the last id of the claim
	// whose chunks this one may take over (see sql/postgres/_partials/hold_chunks.sql), or "" and 0.
	prevToken string
	prevLast  int64
	done      bool
	// from is the id the claim started after (the cursor, or the low-water
	// mark), and spans whether SpanFrom may report it.
	from  int64
	spans bool
}

func (c *leaseClaim) Messages() []outbox.Message { return c.msgs }

// SpanFrom implements outboxdriver.ClaimSpan.
func (c *leaseClaim) SpanFrom() (from int64, ok bool) { return c.from, c.spans }

func (c *leaseClaim) Finish(ctx context.Context, outcomes []outbox.Outcome) (err error) {
	if c.done {
		return fmt.Errorf("outbox: claim already finished")
	}
	c.done = true
	if len(c.msgs) == 0 {
		return nil
	}
	defer func() {
		if err != nil {
			giveUp(ctx, c.release)
		}
	}()
	s := c.s
	sent, others, err := split(c.msgs, outcomes, false)
	if err != nil {
		return err
	}
	if len(others) == 0 {
		if len(sent) == 0 {
			return c.release(ctx, "finish: release claim")
		}
		// The common case: one statement, its own transaction, which may
		// also drop the lease (sentDropsLease).
		q, args := s.c.claimer.markSent(sent, c.token, c.sentCtids(outcomes), requeuedSent(c.msgs, outcomes))
		if err := s.execMark(ctx, q, args); err != nil {
			return s.wrap("mark sent", err)
		}
		s.releaseAfterMark(ctx, c.msgs, outcomes)
		if s.c.claimer.sentDropsLease() {
			return nil
		}
		return c.release(ctx, "finish: release claim")
	}
	begin := s.db.Begin
	if setup := s.c.MarkSetup; setup != "" {
		begin = s.beginWith(setup)
	}
	tx, err := begin(ctx)
	if err != nil {
		return s.wrap("finish: begin", err)
	}
	fail := func(op string, err error) error {
		tx.Rollback(context.WithoutCancel(ctx))
		return s.wrap(op, err)
	}
	if s.c.MarkLock != "" {
		if err := c.lockOthers(ctx, tx, others); err != nil {
			return fail("mark failed: lock", err)
		}
	}
	// The other outcomes first: they read the lease that the SENT mark
	// (PostgreSQL) drops.
	q, args := s.c.markOthersArgs(others, c.token)
	if _, err := tx.Exec(ctx, q, args...); err != nil {
		return fail("mark failed", err)
	}
	if len(sent) > 0 {
		q, args := s.c.claimer.markSent(sent, c.token, c.sentCtids(outcomes), requeuedSent(c.msgs, outcomes))
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return fail("mark sent", err)
		}
	}
	if len(sent) == 0 || !s.c.claimer.sentDropsLease() {
		if _, err := tx.Exec(ctx, s.c.ClaimRelease, c.token); err != nil {
			return fail("finish: release claim", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return s.wrap("finish: commit", err)
	}
	s.releaseAfterMark(ctx, c.msgs, outcomes)
	return nil
}

// lockOthers locks the rows of others in tx (MarkLock).
func (c *leaseClaim) lockOthers(ctx context.Context, tx Tx, others []outcomeRow) error {
	ids := make([]int64, len(others))
	for i, r := range others {
		ids[i] = r.ID
	}
	q, args := c.s.c.withIDs(c.s.c.MarkLock, nil, ids)
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	rows.Close()
	return rows.Err()
}

// sentCtids is the ctids of the messages whose outcome is SENT, in the
// order split lists their ids.
func (c *leaseClaim) sentCtids(outcomes []outbox.Outcome) []string {
	if c.ctids == nil {
		return nil
	}
	var out []string
	for i, o := range outcomes {
		if o.Kind == outbox.OutcomeSent {
			out = append(out, c.ctids[i])
		}
	}
	return out
}

// requeuedSent reports whether a message marked SENT had been requeued (its
// next_retry_at, as claimed, is past its creation).
func requeuedSent(msgs []outbox.Message, outcomes []outbox.Outcome) bool {
	for i, o := range outcomes {
		if o.Kind == outbox.OutcomeSent && msgs[i].NextRetryAt.After(msgs[i].CreatedAt) {
			return true
		}
	}
	return false
}

// Abort gives the rows back unmarked: due again at once, for any relay.
func (c *leaseClaim) Abort(ctx context.Context) error {
	if c.done {
		return nil
	}
	c.done = true
	if len(c.msgs) == 0 {
		return nil
	}
	return c.release(ctx, "abort claim")
}

// giveUp releases the claim of a Finish that failed, in a statement of its
// own with a fresh timeout, so that its rows are due again at once rather
// than when the lease runs out. Its error is dropped: the lease still ends.
func giveUp(ctx context.Context, release func(context.Context, string) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveUpTimeout)
	defer cancel()
	release(ctx, "finish failed: release claim")
}

// giveUpTimeout bounds giveUp's statement.
const giveUpTimeout = 5 * time.Second

func (c *leaseClaim) release(ctx context.Context, op string) error {
	_, err := c.s.db.Exec(ctx, c.s.c.ClaimRelease, c.token)
	return c.s.wrap(op, err)
}

var _ outboxdriver.ClaimSpan = (*leaseClaim)(nil)

package sqlstore

import (
	"context"

	"github.com/outbox-go/outbox/outboxdriver"
)

// claimRows claims for MySQL in one short READ COMMITTED transaction (see
// sql/mysql/claim.sql): the due rows that no live lease holds are locked
// (SKIP LOCKED: rows another relay is claiming are passed over), a lease
// per row is recorded, and the transaction commits.
func (s *Store) claimRows(ctx context.Context, p outboxdriver.ClaimParams) (outboxdriver.Claim, error) {
	begin := s.db.Begin
	if rc, ok := s.db.(readCommittedDB); ok {
		// At REPEATABLE READ InnoDB's locking scan would also lock the
		// gaps between the rows, where writers insert.
		begin = rc.BeginReadCommitted
	}
	tx, err := s.beginRetrying(ctx, begin)
	if err != nil {
		return nil, s.wrap("claim: begin", err)
	}
	fail := func(op string, err error) (outboxdriver.Claim, error) {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, s.wrap(op, err)
	}
	q := s.c.Claim
	if p.AfterID > 0 && s.c.ClaimAfter != "" {
		q = s.c.ClaimAfter
	} else if _, err := tx.Exec(ctx, s.c.ClaimExpire); err != nil {
		return fail("claim: expire", err)
	}
	rows, err := tx.Query(ctx, q, p.AfterID, p.Limit)
	if err != nil {
		return fail("claim", err)
	}
	msgs, err := scanClaimed(rows, false, p.Limit, nil)
	if err != nil {
		return fail("claim", err)
	}
	c := &leaseClaim{s: s, msgs: msgs}
	if len(msgs) > 0 {
		c.token = newToken()
		ids := make([]int64, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		if _, err := tx.Exec(ctx, s.c.ClaimRecord, c.token, p.Lease.Microseconds(), jsonArray(ids)); err != nil {
			return fail("claim: lease", err)
		}
	}
	if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
		if c.token != "" {
			c.release(context.WithoutCancel(ctx), "claim: release")
		}
		return nil, s.wrap("claim: commit", err)
	}
	return c, nil
}

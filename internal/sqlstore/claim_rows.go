package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

// rowsClaimer is MySQL's claim design. The claim locks the due rows with
// SELECT ... FOR UPDATE SKIP LOCKED, records a lease per row in {{claims}}
// (a MEMORY table, which every relay sees at once), and commits; the rows
// are not written until the mark.
type rowsClaimer struct {
	// rescan, cursor and byIDs are Claim, ClaimAfter and ClaimIDs.
	rescan, cursor, byIDs string
	// expire, record and sent are ClaimExpire, ClaimRecord and MarkSent.
	expire, record, sent string
}

// claimRowLease is the design of rowsClaimer.
var claimRowLease = claimDesign{need: "rows", build: func(st *statements) claimer {
	return &rowsClaimer{rescan: st.Claim, cursor: st.ClaimAfter, byIDs: st.ClaimIDs,
		expire: st.ClaimExpire, record: st.ClaimRecord, sent: st.MarkSent}
}}

// claim claims in one short READ COMMITTED transaction (see
// sql/mysql/claim.sql): the due rows that no live lease holds are locked
// (SKIP LOCKED: rows another relay is claiming are passed over), a lease
// per row is recorded, and the transaction commits.
func (k *rowsClaimer) claim(ctx context.Context, s *Store, p outboxdriver.ClaimParams) (outboxdriver.Claim, error) {
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
	q := k.rescan
	if p.AfterID > 0 && k.cursor != "" {
		q = k.cursor
	} else if _, err := tx.Exec(ctx, k.expire); err != nil {
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
		if err := k.recordLease(ctx, tx, c, p.Lease, ids); err != nil {
			return nil, s.wrap("claim: lease", err)
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

// claimIDs is claim for the rows of ids.
func (k *rowsClaimer) claimIDs(ctx context.Context, s *Store, ids []int64, lease time.Duration) (outboxdriver.Claim, error) {
	begin := s.db.Begin
	if rc, ok := s.db.(readCommittedDB); ok {
		begin = rc.BeginReadCommitted
	}
	tx, err := s.beginRetrying(ctx, begin)
	if err != nil {
		return nil, s.wrap("claim by id: begin", err)
	}
	fail := func(op string, err error) (outboxdriver.Claim, error) {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, s.wrap(op, err)
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
	c := &leaseClaim{s: s, msgs: msgs}
	if len(msgs) > 0 {
		c.token = newToken()
		got := make([]int64, len(msgs))
		for i, m := range msgs {
			got[i] = m.ID
		}
		if err := k.recordLease(ctx, tx, c, lease, got); err != nil {
			return nil, s.wrap("claim by id: lease", err)
		}
	}
	if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
		if c.token != "" {
			c.release(context.WithoutCancel(ctx), "claim: release")
		}
		return nil, s.wrap("claim by id: commit", err)
	}
	return c, nil
}

// leaseRecordTimeout bounds the lease insert, which ctx does not end.
const leaseRecordTimeout = 10 * time.Second

// recordLease records c's lease on ids in tx. {{claims}} is not
// transactional: a lease the server wrote stays when the claim fails after
// it, and hides its rows from every relay until it runs out. So the insert
// is not canceled with ctx, and when it fails tx is rolled back and the
// leases of c's token are deleted.
func (k *rowsClaimer) recordLease(ctx context.Context, tx Tx, c *leaseClaim, lease time.Duration, ids []int64) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaseRecordTimeout)
	defer cancel()
	_, err := tx.Exec(rctx, k.record, c.token, lease.Microseconds(), jsonArray(ids))
	if err == nil {
		return nil
	}
	tx.Rollback(rctx)
	if rerr := c.release(rctx, "claim: release"); rerr != nil {
		return fmt.Errorf("%w (its leases stay until they run out, in %s: %v)", err, lease, rerr)
	}
	return err
}

// markSent names the rows in {{ids}}.
func (k *rowsClaimer) markSent(ids []int64, _ string, _ []string, _ bool) (string, []any) {
	return withIDList(k.sent, nil, ids)
}

func (k *rowsClaimer) sentDropsLease() bool { return false }

func (k *rowsClaimer) explain() []explained { return explainClaims(k.rescan, k.cursor) }

// overlap: the claims commit at once and leave no lock behind, so Relay.Run
// may claim beside a mark.
func (k *rowsClaimer) overlap() outboxdriver.ClaimOverlap { return outboxdriver.OverlapAll }

package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

var _ outboxdriver.IDClaimer = (*Store)(nil)

// ClaimIDs implements outboxdriver.IDClaimer: it claims those of ids whose rows
// are NEW, due and outside every live claim, by the dialect's own claim
// (PostgreSQL: the rows' chunks under a lease; MySQL: the rows, locked and
// leased; SQLite: the range from the first to the last claimed id), and
// commits before it returns.
func (s *Store) ClaimIDs(ctx context.Context, ids []int64, lease time.Duration) (outboxdriver.Claim, error) {
	if lease <= 0 {
		return nil, fmt.Errorf("outbox: claim: lease %s must be positive (RelayConfig.Lease)", lease)
	}
	if len(ids) == 0 {
		return &leaseClaim{s: s}, nil
	}
	if len(ids) > 10000 {
		return nil, fmt.Errorf("outbox: claim: %d ids, at most 10000", len(ids))
	}
	switch s.c.mode {
	case claimRange:
		return s.claimRangeIDs(ctx, ids, lease)
	case claimRowLease:
		return s.claimRowsIDs(ctx, ids, lease)
	}
	return s.claimChunksIDs(ctx, ids, lease)
}

// idsSQL is the dialect's ClaimIDs statement, in a dialect with ?
// parameters with {{ids}} replaced by one per id.
func (s *Store) idsSQL(n int) string {
	if n == 0 {
		return s.c.ClaimIDs
	}
	ph := strings.Repeat("?, ", n)
	return strings.Replace(s.c.ClaimIDs, "{{ids}}", ph[:len(ph)-2], 1)
}

func (s *Store) claimChunksIDs(ctx context.Context, ids []int64, lease time.Duration) (outboxdriver.Claim, error) {
	q := s.idsSQL(0)
	c := &leaseClaim{s: s, token: newToken()}
	p := outboxdriver.ClaimParams{Limit: len(ids), Lease: lease}
	for range 4 {
		// See claimChunks: a chunk that changed after the snapshot is
		// looked at again.
		changed, err := s.claimChunksOnce(ctx, c, q, ids, p)
		if err != nil {
			if len(c.msgs) > 0 || ctx.Err() != nil {
				c.release(context.WithoutCancel(ctx), "claim: release")
			}
			return nil, s.wrap("claim by id", err)
		}
		if !changed || len(c.msgs) >= p.Limit {
			break
		}
	}
	if !sortedByID(c.msgs) {
		sortClaimed(c.msgs, c.ctids)
	}
	return c, nil
}

// claimRowsIDs is claimRows for the rows of ids.
func (s *Store) claimRowsIDs(ctx context.Context, ids []int64, lease time.Duration) (outboxdriver.Claim, error) {
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
	rows, err := tx.Query(ctx, s.idsSQL(len(ids)), anyIDs(ids)...)
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
		if _, err := tx.Exec(ctx, s.c.ClaimRecord, c.token, lease.Microseconds(), jsonArray(got)); err != nil {
			return fail("claim by id: lease", err)
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

// claimRangeIDs is claimRange for the rows of ids: the claim records the
// range from the first to the last id it took.
func (s *Store) claimRangeIDs(ctx context.Context, ids []int64, lease time.Duration) (outboxdriver.Claim, error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, s.wrap("claim by id: begin", err)
	}
	fail := func(op string, err error) (outboxdriver.Claim, error) {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, s.wrap(op, err)
	}
	if _, err := tx.Exec(ctx, s.c.ClaimExpire); err != nil {
		return fail("claim by id: expire", err)
	}
	rows, err := tx.Query(ctx, s.idsSQL(len(ids)), anyIDs(ids)...)
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
		if _, err := tx.Exec(ctx, s.c.ClaimRecord, c.token, msgs[0].ID, msgs[len(msgs)-1].ID, lease.Milliseconds()); err != nil {
			return fail("claim by id: record", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, s.wrap("claim by id: commit", err)
	}
	return c, nil
}

func anyIDs(ids []int64) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

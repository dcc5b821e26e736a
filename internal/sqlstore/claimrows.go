package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/outbox-go/outbox"
)

// claimRows claims for MySQL in one short READ COMMITTED transaction (see
// mysqlDialect.claim): it reads the live leases ahead of the cursor, locks
// the due rows outside them (SKIP LOCKED: rows another relay is claiming
// are passed over), leaves the rows that a lease recorded meanwhile took,
// records a lease per run of consecutive ids, and commits.
func (s *Store) claimRows(ctx context.Context, p outbox.ClaimParams) (outbox.Claim, error) {
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
	fail := func(op string, err error) (outbox.Claim, error) {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, s.wrap(op, err)
	}
	q := s.c.claim
	if p.AfterID > 0 && s.c.claimAfter != "" {
		q = s.c.claimAfter
	} else if _, err := tx.Exec(ctx, s.c.claimExpire); err != nil {
		return fail("claim: expire", err)
	}
	leased, err := readLeases(ctx, tx, s.c.claimLeases, p.AfterID)
	if err != nil {
		return fail("claim: leases", err)
	}
	rows, err := tx.Query(ctx, strings.Replace(q, "/*leases*/", outsideLeases(leased), 1), p.AfterID, p.Limit)
	if err != nil {
		return fail("claim", err)
	}
	msgs, err := scanClaimed(rows, false, p.Limit, nil)
	if err != nil {
		return fail("claim", err)
	}
	if len(msgs) > 0 {
		// Every row is locked now, so a claim that took one of them
		// recorded its lease before this read.
		if leased, err = readLeases(ctx, tx, s.c.claimLeases, msgs[0].ID-1); err != nil {
			return fail("claim: leases", err)
		}
		msgs = dropLeased(msgs, leased)
	}
	c := &leaseClaim{s: s, msgs: msgs}
	if len(msgs) > 0 {
		c.token = newToken()
		if _, err := tx.Exec(ctx, s.c.claimRecord, c.token, p.Lease.Microseconds(), idRuns(msgs)); err != nil {
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

// readLeases reads the live leases that reach past id, each [lo, hi].
func readLeases(ctx context.Context, tx Tx, q string, id int64) ([][2]int64, error) {
	rows, err := tx.Query(ctx, q, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][2]int64
	for rows.Next() {
		var l [2]int64
		if err := rows.Scan(&l[0], &l[1]); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// outsideLeases is the condition that keeps the claim's scan off the
// leased id ranges, as ranges of the index it walks.
func outsideLeases(leased [][2]int64) string {
	var b strings.Builder
	for _, l := range leased {
		fmt.Fprintf(&b, "AND (id < %d OR id > %d) ", l[0], l[1])
	}
	return b.String()
}

// dropLeased returns msgs without the messages whose id a lease covers.
func dropLeased(msgs []outbox.Message, leased [][2]int64) []outbox.Message {
	if len(leased) == 0 {
		return msgs
	}
	kept := msgs[:0]
	for _, m := range msgs {
		covered := false
		for _, l := range leased {
			if m.ID >= l[0] && m.ID <= l[1] {
				covered = true
				break
			}
		}
		if !covered {
			kept = append(kept, m)
		}
	}
	return kept
}

// idRuns is the ids of msgs, sorted by id, as a JSON array of runs of
// consecutive ids, each [first, last]: the leases of a MySQL claim, which
// cover only the ids it took.
func idRuns(msgs []outbox.Message) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < len(msgs); {
		j := i
		for j+1 < len(msgs) && msgs[j+1].ID == msgs[j].ID+1 {
			j++
		}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "[%d,%d]", msgs[i].ID, msgs[j].ID)
		i = j + 1
	}
	b.WriteByte(']')
	return b.String()
}

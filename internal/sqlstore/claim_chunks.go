package sqlstore

import (
	"context"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// chunksClaimer is PostgreSQL's claim design. The claim takes chunks of 256
// ids, each under a transaction-scoped advisory lock while it claims, and
// records each chunk with its token and the end of its lease in {{claims}}
// (INSERT ... ON CONFLICT, which reads the newest committed lease whatever
// the statement's snapshot). The rows are not written until the mark, whose
// SENT statement also drops the lease.
type chunksClaimer struct {
	// rescan, cursor and byIDs are Claim, ClaimAfter and ClaimIDs.
	rescan, cursor, byIDs string
	// sent and sentRequeued are MarkSent and MarkSentRequeued.
	sent, sentRequeued string
}

// claimChunks is the design of chunksClaimer.
var claimChunks = claimDesign{need: "chunks", build: func(st *statements) claimer {
	return &chunksClaimer{rescan: st.Claim, cursor: st.ClaimAfter, byIDs: st.ClaimIDs,
		sent: st.MarkSent, sentRequeued: st.MarkSentRequeued}
}}

// claim claims in one statement and commits at once: the statement records
// the chunks it took in {{claims}} under a new token, with the lease's end
// (see sql/postgres/claim.sql).
func (k *chunksClaimer) claim(ctx context.Context, s *Store, p outboxdriver.ClaimParams) (outboxdriver.Claim, error) {
	after := p.AfterID
	if after == 0 && s.c.SweepCheck != "" {
		lwm, err := s.sweep(ctx)
		if err != nil {
			return nil, err
		}
		after = lwm
	}
	q := k.rescan
	if p.AfterID > 0 && k.cursor != "" {
		q = k.cursor
	}
	c := &leaseClaim{s: s, token: newToken(), from: after, spans: p.AfterID > 0 || s.c.SweepCheck != ""}
	c.prevToken, c.prevLast = s.predecessor(p)
	// A chunk that changed after the statement's snapshot is left (see
	// sql/postgres/claim.sql) and marked with a row of id 0: the claim looks
	// again for the rows still wanted, with a new snapshot, in which this
	// claim's own chunks are leased.
	for range 4 {
		changed, err := s.claimChunksOnce(ctx, c, q, after, p)
		if err != nil {
			if len(c.msgs) > 0 || ctx.Err() != nil {
				// Give back what the attempts before claimed, and what a
				// statement cancelled after its commit may have recorded.
				c.release(context.WithoutCancel(ctx), "claim: release")
			}
			return nil, s.wrap("claim", err)
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

// claimIDs claims the rows of ids as claim does, in ClaimIDs' statement.
func (k *chunksClaimer) claimIDs(ctx context.Context, s *Store, ids []int64, lease time.Duration) (outboxdriver.Claim, error) {
	q := k.byIDs
	c := &leaseClaim{s: s, token: newToken()}
	p := outboxdriver.ClaimParams{Limit: len(ids), Lease: lease}
	for range 4 {
		// See claim: a chunk that changed after the snapshot is looked at
		// again.
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

// markSent takes the ids in a bigint array, the token whose lease it drops
// and the rows' ctids; MarkSentRequeued, where set, when a row had been
// requeued (it takes the rows out of the requeued index).
func (k *chunksClaimer) markSent(ids []int64, token string, ctids []string, requeued bool) (string, []any) {
	if requeued && k.sentRequeued != "" {
		return k.sentRequeued, []any{ids, token, ctids}
	}
	return k.sent, []any{ids, token, ctids}
}

func (k *chunksClaimer) sentDropsLease() bool { return true }

// explain plans the claims with an example token, a lease of a second and
// no predecessor.
func (k *chunksClaimer) explain() []explained {
	return explainClaims(k.rescan, k.cursor, "explain", int64(1000), "", int64(0))
}

// overlap: the claims commit at once and leave no lock behind, so Relay.Run
// may claim beside a mark.
func (k *chunksClaimer) overlap() outboxdriver.ClaimOverlap { return outboxdriver.OverlapAll }

// predecessor returns the token and the last id of p.Prev, whose chunks
// the claim may take over for the rows past that id (see sql/postgres/_partials/hold_chunks.sql), or
// "" and 0.
func (s *Store) predecessor(p outboxdriver.ClaimParams) (token string, last int64) {
	prev, ok := p.Prev.(*leaseClaim)
	if !ok || prev.s != s || len(prev.msgs) == 0 {
		return "", 0
	}
	return prev.token, prev.msgs[len(prev.msgs)-1].ID
}

// claimChunksOnce runs the claim statement q once, in a transaction of its
// own (in one round trip where the DB is a TxPipeliner), and adds the rows
// it claimed to c. changed reports a chunk left because it changed after
// the statement's snapshot.
func (s *Store) claimChunksOnce(ctx context.Context, c *leaseClaim, q string, after any, p outboxdriver.ClaimParams) (changed bool, err error) {
	args := []any{after, p.Limit - len(c.msgs), c.token, p.Lease.Milliseconds(), c.prevToken, c.prevLast}
	var msgs []outbox.Message
	var ctids []string
	scan := func(rows Rows) (err error) {
		ctids = nil
		msgs, err = scanClaimed(rows, s.c.claimReturnsDue, p.Limit, &ctids)
		return err
	}
	if pl, ok := s.db.(TxPipeliner); ok {
		// The pipeline ends in its COMMIT: cancelled half way, the server
		// may still commit the claim, and its lease would hide the rows
		// with nobody to release it. So a claim under way is given
		// claimGrace to end once ctx is cancelled.
		sctx, stop := withGrace(ctx, claimGrace)
		defer stop()
		// Safe to repeat on a connection the server had closed: nothing
		// was committed on it.
		_, err = onLiveConnection(sctx, s, func() (struct{}, error) {
			return struct{}{}, pl.QueryCommitted(sctx, s.c.claimSetupStatements(), q, args, scan)
		})
		if err != nil {
			return false, err
		}
	} else {
		begin := s.db.Begin
		if setup := s.c.ClaimSetup; setup != "" {
			begin = s.beginWith(setup)
		}
		tx, err := s.beginRetrying(ctx, begin)
		if err != nil {
			return false, err
		}
		rows, err := tx.Query(ctx, q, args...)
		if err == nil {
			err = scan(rows)
		}
		if err != nil {
			tx.Rollback(context.WithoutCancel(ctx))
			return false, err
		}
		if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
			return false, err
		}
	}
	changed = len(msgs) > 0 && msgs[0].ID == 0 // sorted by id
	if changed {
		msgs, ctids = msgs[1:], ctids[1:]
	}
	c.msgs, c.ctids = append(c.msgs, msgs...), append(c.ctids, ctids...)
	return changed, nil
}

// claimGrace is how long a claim under way may go on once its context is
// cancelled.
const claimGrace = 2 * time.Second

// withGrace returns a context that is cancelled grace after ctx is, and the
// function that releases it.
func withGrace(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	g, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return g, func() {
		stop()
		cancel()
	}
}

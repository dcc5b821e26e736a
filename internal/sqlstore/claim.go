package sqlstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// Claim implements outboxdriver.Store: see claimer for how each dialect keeps two
// relays off the same rows. The claim commits before it returns; the batch is
// held by a lease of p.Lease, which must be positive.
func (s *Store) Claim(ctx context.Context, p outboxdriver.ClaimParams) (outboxdriver.Claim, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("outbox: claim: limit %d must be positive", p.Limit)
	}
	if p.Lease <= 0 {
		return nil, fmt.Errorf("outbox: claim: lease %s must be positive (RelayConfig.Lease)", p.Lease)
	}
	return s.c.claimer.claim(ctx, s, p)
}

// claimer is a claim design: how a dialect keeps two relays off the same
// rows (chunksClaimer, rowsClaimer, rangeClaimer). In every design the
// claim is one short transaction that commits before the publish, and the
// batch is held by a lease that other relays respect; the mark is a
// transaction of its own, which moves a row only from status 0. No
// transaction stays open while the broker has the batch, so a server's or
// a pooler's idle-in-transaction timeout never ends a claim. A claimer
// keeps the statements it runs; the dialect's is chosen when its SQL is
// compiled (compiled.claimer).
type claimer interface {
	// claim claims for Store.Claim, whose p has a positive limit and lease.
	claim(ctx context.Context, s *Store, p outboxdriver.ClaimParams) (outboxdriver.Claim, error)
	// claimIDs claims for Store.ClaimIDs: 1 to 10000 ids, a positive lease.
	claimIDs(ctx context.Context, s *Store, ids []int64, lease time.Duration) (outboxdriver.Claim, error)
	// markSent returns the statement that marks the rows of ids SENT, and
	// its arguments, for the claim under token. ctids are the rows' ctids
	// as the claim read them (nil where it reads none); requeued says that
	// one of the rows had been requeued.
	markSent(ids []int64, token string, ctids []string, requeued bool) (string, []any)
	// sentDropsLease reports whether markSent also drops the claim's
	// lease, so that a claim whose rows are all SENT needs no ClaimRelease.
	sentDropsLease() bool
	// explain returns the claim statements that ExplainClaim plans, with
	// arguments to plan them by: the rescan, then, named, the claim from a
	// cursor where the design has one. Their Querier is ExplainClaim's.
	explain() []explained
	// overlap is what Relay.Run may run beside a claim (see
	// Store.ClaimOverlap).
	overlap() outboxdriver.ClaimOverlap
}

// claimDesign is a claim design as a dialect names it: need is its name in
// the tag need of statements, and build makes its claimer of the dialect's
// compiled statements.
type claimDesign struct {
	need  string
	build func(st *statements) claimer
}

// explainClaims is explain's answer for a design whose rescan is rescan
// and whose claim from a cursor, when set, is cursor. Both plan for a
// limit of 500 after id 0 (the rescan) or 1 (the cursor), then args.
func explainClaims(rescan, cursor string, args ...any) []explained {
	out := []explained{{stmt: rescan, args: append([]any{int64(0), 500}, args...)}}
	if cursor != "" {
		out = append(out, explained{name: "from a cursor", stmt: cursor, args: append([]any{int64(1), 500}, args...)})
	}
	return out
}

// scanClaimed reads the claimed rows; withDue, a ninth column gives the time
// each row came due (its next_retry_at, which the claim does not change).
// With ctids, a last column gives each row's ctid (PostgreSQL), which
// scanClaimed appends to *ctids in the order of the messages it returns.
func scanClaimed(rows Rows, withDue bool, limit int, ctids *[]string) ([]outbox.Message, error) {
	defer rows.Close()
	msgs := make([]outbox.Message, 0, min(limit, 10000)) // Claim refuses a limit below 1
	// One set of destinations serves every row, so that a row costs only
	// the values it holds. payload and headers start nil for each row, so
	// that no driver can reuse the bytes of the row before.
	var (
		m                outbox.Message
		key              textValue
		payload, headers []byte
		created, due     lenientTime
		ctid             string
	)
	dest := []any{&m.ID, &m.MsgID, &m.Topic, &key, &payload, &headers, &m.Retries, &created, &due}
	if !withDue {
		dest = dest[:len(dest)-1]
	}
	var tids []string
	if ctids != nil {
		dest = append(dest, &ctid)
	}
	for rows.Next() {
		m, key, payload, headers, created, due = outbox.Message{}, textValue{}, nil, nil, lenientTime{}, lenientTime{}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		m.Key, m.CreatedAt, m.NextRetryAt, m.Payload = key.s, created.Time, due.Time, payload
		if len(headers) > 0 {
			h, err := decodeHeaders(headers)
			if err != nil {
				return nil, err
			}
			m.Headers = h
		}
		msgs = append(msgs, m)
		if ctids != nil {
			tids = append(tids, ctid)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// The rows come in no set order; the relay publishes in id order.
	if !sortedByID(msgs) {
		sortClaimed(msgs, tids)
	}
	if ctids != nil {
		*ctids = tids
	}
	return msgs, nil
}

func sortedByID(msgs []outbox.Message) bool {
	return sort.SliceIsSorted(msgs, func(i, j int) bool { return msgs[i].ID < msgs[j].ID })
}

// sortClaimed sorts msgs by id, and ctids (nil, or one per message) with them.
func sortClaimed(msgs []outbox.Message, ctids []string) {
	order := make([]int, len(msgs))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool { return msgs[order[i]].ID < msgs[order[j]].ID })
	sorted := make([]outbox.Message, len(msgs))
	for i, o := range order {
		sorted[i] = msgs[o]
	}
	copy(msgs, sorted)
	if ctids != nil {
		st := make([]string, len(ctids))
		for i, o := range order {
			st[i] = ctids[o]
		}
		copy(ctids, st)
	}
}

func newToken() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

package sqlstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// Claim implements outboxdriver.Store: see claimMode for how each dialect keeps two
// relays off the same rows. The claim commits before it returns; the batch is
// held by a lease of p.Lease, which must be positive.
func (s *Store) Claim(ctx context.Context, p outboxdriver.ClaimParams) (outboxdriver.Claim, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("outbox: claim: limit %d must be positive", p.Limit)
	}
	if p.Lease <= 0 {
		return nil, fmt.Errorf("outbox: claim: lease %s must be positive (RelayConfig.Lease)", p.Lease)
	}
	switch s.c.mode {
	case claimRange:
		return s.claimRange(ctx, p)
	case claimRowLease:
		return s.claimRows(ctx, p)
	}
	return s.claimChunks(ctx, p)
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

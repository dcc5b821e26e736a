package sqlstore

import (
	"context"
	"fmt"
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
	return s.c.claimer.claimIDs(ctx, s, ids, lease)
}

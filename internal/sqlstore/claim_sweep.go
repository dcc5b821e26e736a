package sqlstore

import (
	"context"
	"fmt"

	"github.com/outbox-go/outbox"
)

// sweep advances the low-water mark a rescan claims from, when every
// transaction that was running at the last sweep has ended (see
// sql/postgres/sweep_check.sql), and returns the mark. It is two statements,
// each its own transaction; when several relays sweep at once, one advances
// the mark and the others change nothing.
func (s *Store) sweep(ctx context.Context) (int64, error) {
	// Both statements are safe to repeat.
	lwm, err := onLiveConnection(ctx, s, func() (int64, error) { return s.sweepOnce(ctx) })
	if err != nil && s.classify != nil && s.classify(err) == ErrUndefinedTable {
		return 0, fmt.Errorf("outbox: claim: %w (table %q: this relay needs the tables' schema version %d; run outbox migrate): %w",
			outbox.ErrSchemaMissing, s.tables.Outbox+"_horizon", s.LatestVersion(), err)
	}
	return lwm, s.wrap("claim: sweep", err)
}

func (s *Store) sweepOnce(ctx context.Context) (int64, error) {
	if !s.seqChecked.Load() && s.c.SeqCache != "" {
		// The sweep's reasoning needs ids taken in order: a backend that
		// caches sequence values hands out ids below ones already committed.
		var cache int64
		if _, err := queryRow(ctx, s.db, s.c.SeqCache, nil, &cache); err != nil {
			return 0, err
		}
		if cache > 1 {
			return 0, fmt.Errorf("the id sequence of %s has CACHE %d, and the relay's low-water mark needs CACHE 1 "+
				"(ids taken in order): ALTER TABLE %s ALTER COLUMN id SET CACHE 1", s.tables.Outbox, cache, s.tables.Outbox)
		}
		s.seqChecked.Store(true)
	}
	var gen, lwm int64
	var ready bool
	found, err := queryRow(ctx, s.db, s.c.SweepCheck, nil, &gen, &lwm, &ready)
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("the low-water mark's row is missing from %s_horizon: run outbox migrate", s.tables.Outbox)
	}
	if !ready {
		return lwm, nil
	}
	var advanced int64
	found, err = queryRow(ctx, s.db, s.c.SweepAdvance, []any{gen}, &advanced)
	if err != nil || !found {
		return lwm, err // not found: another relay swept first; lwm still holds
	}
	return advanced, nil
}

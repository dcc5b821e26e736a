package sqlstore

import (
	"context"
	"sync"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

// probeSweepEvery is how often AnyDue sweeps while the low-water mark lags
// the highest id.
const probeSweepEvery = time.Second

// prober holds when AnyDue last swept.
type prober struct {
	mu    sync.Mutex
	swept time.Time
}

var _ outboxdriver.DueChecker = (*Store)(nil)

// AnyDue implements outboxdriver.DueChecker in one statement (statements.Probe). On
// PostgreSQL it also advances the low-water mark (two more statements),
// at most once a second, while the mark lags the highest id: so the mark
// reaches the top once the relay is idle, and an idle probe walks no row.
func (s *Store) AnyDue(ctx context.Context) (bool, error) {
	p := &s.probe
	lwm, top, due, err := s.probeOnce(ctx, s.c.Probe)
	if err != nil {
		return false, s.wrap("probe", err)
	}
	if due || lwm >= top || s.c.SweepCheck == "" {
		return due, nil
	}
	p.mu.Lock()
	now := time.Now()
	sweep := now.Sub(p.swept) >= probeSweepEvery
	if sweep {
		p.swept = now
	}
	p.mu.Unlock()
	if sweep {
		if _, err := s.sweep(ctx); err != nil {
			return false, err
		}
	}
	return false, nil
}

// probeOnce runs the probe. On PostgreSQL it runs in a transaction with the
// claim's planner settings (claimSetup), in one round trip where the DB is a
// TxPipeliner: with statistics that say the table holds few rows the planner
// would rather read the whole table than walk an index.
func (s *Store) probeOnce(ctx context.Context, q string) (lwm, top int64, due bool, err error) {
	scan := func(rows Rows) error {
		defer rows.Close()
		if rows.Next() {
			if err := rows.Scan(&lwm, &top, &due); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	_, err = onLiveConnection(ctx, s, func() (struct{}, error) {
		if s.c.ClaimSetup == "" {
			rows, err := s.db.Query(ctx, q)
			if err != nil {
				return struct{}{}, err
			}
			return struct{}{}, scan(rows)
		}
		if pl, ok := s.db.(TxPipeliner); ok {
			return struct{}{}, pl.QueryCommitted(ctx, s.c.claimSetupStatements(), q, nil, scan)
		}
		tx, err := s.beginWith(s.c.ClaimSetup)(ctx)
		if err != nil {
			return struct{}{}, err
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		rows, err := tx.Query(ctx, q)
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, scan(rows)
	})
	return lwm, top, due, err
}

package sqlstore

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/outbox-go/outbox"
)

// probeSQL is, per dialect, the one statement of AnyDue: is any row NEW and
// due? It reads no lease: a row another relay holds counts as due, and the
// claim that follows finds it held.
//
// PostgreSQL has no index on status (the SENT update must stay HOT), so the
// probe looks where the rescan claim looks: past the low-water mark along
// the primary key, and at or below it along the requeued index, each an
// ORDER BY id LIMIT 1 that walks the index from its start and stops at the
// first due row. It also returns the mark and the highest id: while the mark
// lags the highest id, the rows between are walked by every probe, and
// AnyDue sweeps now and then to move the mark on. The mark is 0 after the
// identity was restarted, as in sweepCheck.
var probeSQL = map[string]string{
	"postgres": `SELECT m.lwm, coalesce((SELECT max(id) FROM {{outbox}}), 0),
  (SELECT id FROM {{outbox}} WHERE id > m.lwm AND status = 0 AND next_retry_at <= now() ORDER BY id LIMIT 1) IS NOT NULL
  OR (SELECT id FROM {{outbox}} WHERE next_retry_at > created_at AND id <= m.lwm AND status = 0 AND next_retry_at <= now()
      ORDER BY id LIMIT 1) IS NOT NULL
FROM (SELECT CASE WHEN h.seq_node = s.node THEN h.lwm ELSE 0 END AS lwm
      FROM {{horizon}} AS h, (` + seqNode + `) AS s) AS m`,
	// MySQL and SQLite walk their pending index (status = 0).
	"mysql": `SELECT 0, 0, EXISTS (SELECT 1 FROM {{outbox}} FORCE INDEX ({{outbox_pending_idx}})
  WHERE status = 0 AND next_retry_at <= UTC_TIMESTAMP(6))`,
	"sqlite": `SELECT 0, 0, EXISTS (SELECT 1 FROM {{outbox}}
  WHERE status = 0 AND next_retry_at <= strftime('%Y-%m-%d %H:%M:%f', 'now'))`,
}

// probeSweepEvery is how often AnyDue sweeps while the low-water mark lags
// the highest id.
const probeSweepEvery = time.Second

// prober holds AnyDue's statement and when it last swept.
type prober struct {
	once  sync.Once
	sql   string
	mu    sync.Mutex
	swept time.Time
}

var _ outbox.DueChecker = (*Store)(nil)

// AnyDue implements outbox.DueChecker in one statement (probeSQL). On
// PostgreSQL it also advances the low-water mark (two more statements),
// at most once a second, while the mark lags the highest id: so the mark
// reaches the top once the relay is idle, and an idle probe walks no row.
func (s *Store) AnyDue(ctx context.Context) (bool, error) {
	p := &s.probe
	p.once.Do(func() {
		q := probeSQL[s.c.name]
		for k, v := range map[string]string{
			"{{outbox}}": s.c.quote(s.tables.Outbox), "{{horizon}}": s.c.quote(s.tables.Outbox + "_horizon"),
			"{{outbox_pending_idx}}": s.c.quote(s.tables.Outbox + "_pending_idx"),
		} {
			q = strings.ReplaceAll(q, k, v)
		}
		p.sql = q
	})
	lwm, top, due, err := s.probeOnce(ctx, p.sql)
	if err != nil {
		return false, s.wrap("probe", err)
	}
	if due || lwm >= top || s.c.sweepCheck == "" {
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
		if s.c.claimSetup == "" {
			rows, err := s.db.Query(ctx, q)
			if err != nil {
				return struct{}{}, err
			}
			return struct{}{}, scan(rows)
		}
		if pl, ok := s.db.(TxPipeliner); ok {
			return struct{}{}, pl.QueryCommitted(ctx, s.c.claimSetupStatements(), q, nil, scan)
		}
		tx, err := s.beginWith(s.c.claimSetup)(ctx)
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

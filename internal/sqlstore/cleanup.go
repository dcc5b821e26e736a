package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// DeleteSent implements outboxdriver.Store.
func (s *Store) DeleteSent(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	return s.deleteOld(ctx, s.c.OldSent, s.c.DeleteSent, "delete sent messages", olderThan, limit, scanID)
}

// DeleteConsumed implements outboxdriver.Store.
func (s *Store) DeleteConsumed(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	return s.deleteOld(ctx, s.c.OldConsumed, s.c.DeleteConsumed, "delete inbox records", olderThan, limit, scanInboxKey)
}

// deleteOld runs a cleanup: del, whose arguments are the age (in
// milliseconds) and the limit; or, where the dialect reads the keys first
// (sel, MySQL), sel with the age in microseconds and the limit, then del
// with the keys (each read by scan) as a JSON array and the age in
// microseconds.
func (s *Store) deleteOld(ctx context.Context, sel, del, what string, olderThan time.Duration, limit int,
	scan func(Rows) (any, error)) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("outbox: %s: older-than %s is negative", what, olderThan)
	}
	if sel == "" {
		n, err := s.execCleanup(ctx, del, olderThan.Milliseconds(), limit)
		return n, s.wrap(what, err)
	}
	rows, err := s.db.Query(ctx, sel, olderThan.Microseconds(), limit)
	if err != nil {
		return 0, s.wrap(what, err)
	}
	var keys []any
	for rows.Next() {
		k, err := scan(rows)
		if err != nil {
			rows.Close()
			return 0, s.wrap(what, err)
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(keys) == 0 {
		return 0, s.wrap(what, err)
	}
	list, err := json.Marshal(keys)
	if err != nil {
		return 0, err
	}
	n, err := s.execCleanup(ctx, del, string(list), olderThan.Microseconds())
	return n, s.wrap(what, err)
}

// scanID reads an outbox row's id.
func scanID(rows Rows) (any, error) {
	var id int64
	err := rows.Scan(&id)
	return id, err
}

// scanInboxKey reads an inbox record's primary key, as a [group, msg_id] pair.
func scanInboxKey(rows Rows) (any, error) {
	var k [2]string
	err := rows.Scan(&k[0], &k[1])
	return k, err
}

// execCleanup runs a cleanup's DELETE. On InnoDB it runs at READ COMMITTED:
// at REPEATABLE READ a DELETE also locks the gaps between the rows it
// reads, until it ends, and the gap after the last SENT row (or after a key
// that is gone) is where writers and consumers insert (see
// dialect.readCommitted).
func (s *Store) execCleanup(ctx context.Context, stmt string, args ...any) (int64, error) {
	rc, ok := s.db.(readCommittedDB)
	if !ok || !s.c.readCommitted {
		return s.db.Exec(ctx, stmt, args...)
	}
	tx, err := rc.BeginReadCommitted(ctx)
	if err != nil {
		return 0, err
	}
	n, err := tx.Exec(ctx, stmt, args...)
	if err != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		return 0, err
	}
	return n, tx.Commit(ctx)
}

// Truncate deletes every row of the outbox table, whatever its status. It is
// for benchmarks on tables of their own, never for production tables, and is
// deliberately not part of outboxdriver.Store.
func (s *Store) Truncate(ctx context.Context) error {
	_, err := s.db.Exec(ctx, s.c.Truncate)
	return s.wrap("truncate", err)
}

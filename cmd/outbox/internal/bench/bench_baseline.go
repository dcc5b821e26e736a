package bench

import (
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"time"

	"github.com/jackc/pgx/v5"
)

// benchBaseline runs the smallest relay one could write by hand in plain pgx,
// on the same table and messages, so that the outbox relay's figure can be
// read as a ratio on a shared, noisy machine: per batch, BEGIN; SELECT ids
// FOR UPDATE SKIP LOCKED past the last id it claimed; UPDATE them to SENT;
// COMMIT (durable). It publishes nothing, like discard:, and handles no
// failure. It walks the primary key from its last id, as a loop written for
// this schema would (PostgreSQL's outbox table has no status index, so that
// its SENT update can be HOT).
func benchBaseline(ctx context.Context, db *dbopen.Database, o *benchOptions, prefix string) (float64, error) {
	if db.PG == nil {
		return 0, fmt.Errorf("--baseline is for PostgreSQL")
	}
	if err := fill(ctx, db, prefix, o.messages, 0, benchPayload(o.payloadBytes), nil); err != nil {
		return 0, err
	}
	table := pgx.Identifier{db.Store.Tables().Outbox}.Sanitize()
	claim := `SELECT id FROM ` + table + ` WHERE id > $2 AND status = 0 AND next_retry_at <= now() ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`
	mark := `UPDATE ` + table + ` SET status = 1, sent_at = now() WHERE id = ANY($1)`
	pool := db.PG.Pool()
	start := time.Now()
	done := 0
	last := int64(0)
	for done < o.messages {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, claim, o.batch, last)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				return err
			}
			if len(ids) == 0 {
				return fmt.Errorf("baseline: ran dry after %d of %d", done, o.messages)
			}
			done += len(ids)
			last = ids[len(ids)-1]
			_, err = tx.Exec(ctx, mark, ids)
			return err
		})
		if err != nil {
			return 0, err
		}
	}
	return float64(done) / time.Since(start).Seconds(), nil
}

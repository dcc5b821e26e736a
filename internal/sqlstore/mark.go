package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/outbox-go/outbox"
)

// outcomeRow is one non-sent outcome as the MarkOthers statements read it.
type outcomeRow struct {
	ID    int64  `json:"id"`
	Kind  int    `json:"k"`
	Delay int64  `json:"d"`
	Error string `json:"e"`
}

// split sorts outcomes into ids to mark SENT and rows for MarkOthers. Release
// rows are included only when the dialect must write them.
func split(msgs []outbox.Message, outcomes []outbox.Outcome, withRelease bool) (sent []int64, others []outcomeRow, err error) {
	if len(outcomes) != len(msgs) {
		return nil, nil, fmt.Errorf("outbox: finish: %d outcomes for %d messages", len(outcomes), len(msgs))
	}
	for i, o := range outcomes {
		switch o.Kind {
		case outbox.OutcomeSent:
			sent = append(sent, msgs[i].ID)
		case outbox.OutcomeRelease:
			if withRelease {
				others = append(others, outcomeRow{ID: msgs[i].ID, Kind: int(o.Kind)})
			}
		default:
			others = append(others, outcomeRow{ID: msgs[i].ID, Kind: int(o.Kind), Delay: o.Delay.Milliseconds(), Error: o.Error})
		}
	}
	return sent, others, nil
}

func (c *compiled) markOthersArgs(rows []outcomeRow, token string) (string, []any) {
	b, _ := json.Marshal(rows)
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return c.withIDs(c.MarkOthers, []any{string(b), token}, ids)
}

// execMark runs the mark q as a transaction of its own, after the dialect's
// markSetup where it has one, in one round trip where the DB is a
// TxPipeliner.
func (s *Store) execMark(ctx context.Context, q string, args []any) error {
	if s.c.MarkSetup == "" {
		_, err := s.db.Exec(ctx, q, args...)
		return err
	}
	if pl, ok := s.db.(TxPipeliner); ok {
		return pl.QueryCommitted(ctx, setupStatements(s.c.MarkSetup), q, args, func(rows Rows) error {
			defer rows.Close()
			return rows.Err()
		})
	}
	tx, err := s.beginWith(s.c.MarkSetup)(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, q, args...); err != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	return tx.Commit(context.WithoutCancel(ctx))
}

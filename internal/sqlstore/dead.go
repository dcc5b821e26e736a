package sqlstore

import (
	"context"

	"github.com/outbox-go/outbox"
)

// RetryDead implements outboxdriver.Store.
func (s *Store) RetryDead(ctx context.Context, f outbox.DeadFilter, note string) (int64, error) {
	if !f.All && len(f.MsgIDs) == 0 {
		return 0, nil
	}
	keys, err := s.deadKeys(ctx, f)
	if err != nil {
		return 0, err
	}
	n, err := s.db.Exec(ctx, s.c.RetryDead, note, jsonArray(f.MsgIDs), f.All, f.Topic)
	if err != nil {
		return n, s.wrap("retry dead messages", err)
	}
	return n, s.releaseKeys(ctx, keys)
}

// DropDead implements outboxdriver.Store.
func (s *Store) DropDead(ctx context.Context, f outbox.DeadFilter) (int64, error) {
	if !f.All && len(f.MsgIDs) == 0 {
		return 0, nil
	}
	keys, err := s.deadKeys(ctx, f)
	if err != nil {
		return 0, err
	}
	n, err := s.db.Exec(ctx, s.c.DropDead, jsonArray(f.MsgIDs), f.All, f.Topic)
	if err != nil {
		return n, s.wrap("drop dead messages", err)
	}
	return n, s.releaseKeys(ctx, keys)
}

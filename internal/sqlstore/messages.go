package sqlstore

import (
	"context"
	"fmt"

	"github.com/outbox-go/outbox"
)

// listQuery is the statement that lists f's messages, and its arguments:
// the dialect's DEAD list, which names its DEAD index's condition, for the
// DEAD ones where it has one.
func (s *Store) listQuery(f outbox.ListFilter) (string, []any) {
	if f.Status == outbox.StatusDead && s.c.ListDead != "" {
		return s.c.ListDead, []any{f.Topic, f.AfterID, f.Limit}
	}
	if f.Status == outbox.StatusNew && s.c.ListNew != "" {
		return s.c.ListNew, []any{f.Topic, f.AfterID, f.Limit}
	}
	return s.c.List, []any{int(f.Status), f.Topic, f.AfterID, f.Limit}
}

// ListMessages implements outboxdriver.Store.
func (s *Store) ListMessages(ctx context.Context, f outbox.ListFilter) ([]outbox.Message, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	stmt, args := s.listQuery(f)
	var q Querier = s.db
	if f.Status == outbox.StatusNew && s.c.ListNew != "" {
		bq, done, err := s.backlogQuerier(ctx)
		if err != nil {
			return nil, s.wrap("list messages", err)
		}
		defer done()
		q = bq
	}
	rows, err := q.Query(ctx, stmt, args...)
	if err != nil {
		return nil, s.wrap("list messages", err)
	}
	defer rows.Close()
	var out []outbox.Message
	for rows.Next() {
		var m outbox.Message
		var key, lastErr textValue
		var status int16
		var next, created, sent, dead lenientTime
		if err := rows.Scan(&m.ID, &m.MsgID, &m.Topic, &key, &status, &m.Retries, &next, &created, &sent, &lastErr, &dead); err != nil {
			return nil, s.wrap("list messages", err)
		}
		m.Key, m.LastError, m.Status = key.s, lastErr.s, outbox.Status(status)
		m.NextRetryAt, m.CreatedAt, m.SentAt, m.DeadAt = next.Time, created.Time, sent.Time, dead.Time
		out = append(out, m)
	}
	return out, s.wrap("list messages", rows.Err())
}

// GetMessage implements outboxdriver.Store.
func (s *Store) GetMessage(ctx context.Context, msgID string) (outbox.Message, error) {
	rows, err := s.db.Query(ctx, s.c.Get, msgID)
	if err != nil {
		return outbox.Message{}, s.wrap("get message", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return outbox.Message{}, s.wrap("get message", err)
		}
		return outbox.Message{}, fmt.Errorf("%w: msg_id %q", outbox.ErrNotFound, msgID)
	}
	var m outbox.Message
	var key, lastErr textValue
	var payload, headers []byte
	var status int16
	var next, created, sent, dead lenientTime
	if err := rows.Scan(&m.ID, &m.MsgID, &m.Topic, &key, &payload, &headers, &status, &m.Retries, &next, &created, &sent, &lastErr, &dead); err != nil {
		return m, s.wrap("get message", err)
	}
	m.Key, m.LastError, m.Status, m.Payload = key.s, lastErr.s, outbox.Status(status), payload
	m.NextRetryAt, m.CreatedAt, m.SentAt, m.DeadAt = next.Time, created.Time, sent.Time, dead.Time
	if m.Headers, err = decodeHeaders(headers); err != nil {
		return m, err
	}
	return m, nil
}

package sqlstore

import (
	"context"
	"encoding/json"
	"sort"

	"github.com/outbox-go/outbox"
)

// InsertOne returns the statement and arguments that insert m. The
// statement changes no row when m's msg_id is already in the table (ON
// CONFLICT DO NOTHING where the dialect has it), so that the caller's
// transaction stays usable; InsertedOne reads its row count.
func (s *Store) InsertOne(m *outbox.Message) (string, []any, error) {
	headers, err := encodeHeaders(m.Headers)
	if err != nil {
		return "", nil, err
	}
	return s.c.InsertOne, []any{m.MsgID, m.Topic, nullString(m.Key), string(m.Payload), headers}, nil
}

// InsertOneStrict is InsertOne for a statement whose row count nobody may
// read (outboxpgx's WriteOnCommit, sent with the COMMIT, and QueueWrite, in
// the caller's batch): a msg_id already in the table is an error
// (ErrUnique), which on PostgreSQL aborts the transaction, so that nothing
// of it commits.
func (s *Store) InsertOneStrict(m *outbox.Message) (string, []any, error) {
	stmt, args, err := s.InsertOne(m)
	if s.c.InsertOneStrict != "" {
		stmt = s.c.InsertOneStrict
	}
	return stmt, args, err
}

// InsertedOne reads the rows InsertOne's statement affected: none means
// msgID was already in the table.
func InsertedOne(msgID string, rowsAffected int64) error {
	if rowsAffected == 0 {
		return &outbox.DuplicateError{MsgIDs: []string{msgID}}
	}
	return nil
}

// InsertTx implements outboxdriver.Driver's InsertTx on q, the caller's transaction.
func (s *Store) InsertTx(ctx context.Context, q Querier, msgs []outbox.Message) error {
	if len(msgs) == 1 {
		m := &msgs[0]
		stmt, args, err := s.InsertOne(m)
		if err != nil {
			return err
		}
		n, err := q.Exec(ctx, stmt, args...)
		if err != nil {
			switch s.classify(err) {
			case ErrUnique:
				return &outbox.DuplicateError{MsgIDs: []string{m.MsgID}}
			case ErrRejected:
				return s.Rejected(0, m.MsgID, err)
			}
			return s.wrap("insert message", err)
		}
		return InsertedOne(m.MsgID, n)
	}
	if s.c.InsertManyPG != "" {
		return s.insertManyArrays(ctx, q, msgs)
	}
	args := make([]any, 0, 5*len(msgs))
	for i := range msgs {
		m := &msgs[i]
		headers, err := encodeHeaders(m.Headers)
		if err != nil {
			return err
		}
		args = append(args, m.MsgID, m.Topic, nullString(m.Key), string(m.Payload), headers)
	}
	if _, err := q.Exec(ctx, s.c.insertMany(len(msgs)), args...); err != nil {
		switch s.classify(err) {
		case ErrUnique:
			// The statement failed as a whole and the transaction goes on; say
			// which msg_ids were there already.
			return s.duplicates(ctx, q, msgs)
		case ErrRejected:
			return s.Rejected(-1, "", err)
		}
		return s.wrap("insert messages", err)
	}
	return nil
}

// Rejected reports a message the database refused though it passed
// outbox's validation (a dialect's own limit, such as MariaDB's 31 levels of
// JSON nesting), as an outbox.ValidationError that wraps the database's
// error. index is the message's position in the call, or -1 when a
// statement of several rows failed as a whole.
func (s *Store) Rejected(index int, msgID string, err error) error {
	reason := "the database refused it"
	if s.c.name == "postgres" {
		reason += ", and PostgreSQL aborted the transaction: roll back"
	}
	return &outbox.ValidationError{Index: index, MsgID: msgID, Field: "message",
		Reason: reason + " (" + err.Error() + ")", Err: err}
}

// insertManyArrays inserts from arrays with ON CONFLICT DO NOTHING, so that a
// duplicate does not abort the caller's PostgreSQL transaction; on a duplicate
// it deletes what it inserted, to keep the call all or nothing.
func (s *Store) insertManyArrays(ctx context.Context, q Querier, msgs []outbox.Message) error {
	ids := make([]string, len(msgs))
	topics := make([]string, len(msgs))
	keys := make([]string, len(msgs))
	payloads := make([]string, len(msgs))
	headers := make([]string, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		ids[i], topics[i], keys[i], payloads[i] = m.MsgID, m.Topic, m.Key, string(m.Payload)
		if len(m.Headers) > 0 {
			h, err := json.Marshal(m.Headers)
			if err != nil {
				return err
			}
			headers[i] = string(h)
		}
	}
	rows, err := q.Query(ctx, s.c.InsertManyPG, ids, topics, keys, payloads, headers)
	if err != nil {
		return s.insertError(err)
	}
	inserted, err := scanStrings(rows)
	if err != nil {
		return s.insertError(err)
	}
	if len(inserted) == len(msgs) {
		return nil
	}
	if len(inserted) > 0 {
		if _, err := q.Exec(ctx, s.c.DeleteInserted, inserted); err != nil {
			return s.wrap("undo partial insert", err)
		}
	}
	got := make(map[string]bool, len(inserted))
	for _, id := range inserted {
		got[id] = true
	}
	var dups []string
	for _, id := range ids {
		if !got[id] {
			dups = append(dups, id)
		}
	}
	return &outbox.DuplicateError{MsgIDs: dups}
}

func (s *Store) insertError(err error) error {
	if s.classify(err) == ErrRejected {
		return s.Rejected(-1, "", err)
	}
	return s.wrap("insert messages", err)
}

func (s *Store) duplicates(ctx context.Context, q Querier, msgs []outbox.Message) error {
	ids := make([]string, len(msgs))
	for i := range msgs {
		ids[i] = msgs[i].MsgID
	}
	rows, err := q.Query(ctx, s.c.Existing, jsonArray(ids))
	if err != nil {
		return s.wrap("find duplicates", err)
	}
	dups, err := scanStrings(rows)
	if err != nil {
		return s.wrap("find duplicates", err)
	}
	if len(dups) == 0 {
		dups = ids // a concurrent writer's row that is not visible to us yet
	}
	sort.Strings(dups)
	return &outbox.DuplicateError{MsgIDs: dups}
}

// MarkConsumedTx implements outboxdriver.Driver's MarkConsumedTx on q.
func (s *Store) MarkConsumedTx(ctx context.Context, q Querier, group, msgID string) (bool, error) {
	n, err := q.Exec(ctx, s.c.Consume, group, msgID)
	if err != nil {
		if s.classify(err) == ErrUnique {
			return false, nil
		}
		return false, s.wrap("record consumed message", err)
	}
	return n > 0, nil
}

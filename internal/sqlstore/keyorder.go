package sqlstore

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// keyOrderSQL is the SQL of the per-key hold-back (outboxdriver.KeyOrderer) of one
// dialect, from sql/<dialect>/keyorder as statements is from sql/<dialect>.
// Each dialect has an index on the key for it ({{outbox_key_idx}}:
// PostgreSQL version 8, MySQL version 5, SQLite version 4).
type keyOrderSQL struct {
	// Blockers lists, for each key of a batch, rows of that key below the
	// batch's highest id of the key that are NEW (or DEAD, when asked):
	// at least every such row outside the batch up to the first of them.
	// Rows: key, id, status.
	Blockers string `need:"all"`
	// BlockersSetup, when set, runs first in Blockers' transaction
	// (PostgreSQL: planner settings that keep it on its indexes).
	BlockersSetup string
	// Hold moves each held row's next_retry_at: behind a blocker that waits
	// out a backoff, the hold wait from now; behind a due one (in another
	// claim), the blocker's; behind a DEAD one, the dead wait from now;
	// behind one no longer NEW, now.
	Hold string `need:"all"`
	// ReleaseAfter makes due at once the NEW rows that wait for a later
	// time of each key above a row just marked SENT or DEAD: the rows held
	// behind it. Args: a JSON array of [key, id].
	ReleaseAfter string `need:"all"`
	// BlockerState, when set, reads the blockers' id, status and
	// next_retry_at without a lock, and Hold takes them as values (MySQL).
	// Args: the JSON array of [id, blocker].
	BlockerState string

	// DeadKeys lists the keys of the DEAD rows a DeadFilter selects (args
	// as DropDead's).
	DeadKeys string `need:"all"`
	// Release makes the NEW rows of keys that wait for a later time due at
	// once: a DEAD message of theirs was retried or dropped.
	Release string `need:"all"`
}

// batchKey is one key of a batch: its highest id in the batch and how many
// of the batch's messages have it.
type batchKey struct {
	Key string `json:"k"`
	Hi  int64  `json:"hi"`
	N   int    `json:"n"`
	// Lo is the key's done id (outboxdriver.HoldParams.Done) when below Hi, else 0.
	Lo int64 `json:"lo"`
}

// batchKeysOf returns the keys of msgs in their first message's order, the
// same by key, and the ids of msgs that have a key. Each key's Lo is its
// done id (done) when below its Hi.
func batchKeysOf(msgs []outbox.Message, done map[string]int64) (order []*batchKey, keys map[string]*batchKey, inBatch map[int64]bool) {
	keys, inBatch = map[string]*batchKey{}, map[int64]bool{}
	for _, m := range msgs {
		if m.Key == "" {
			continue
		}
		inBatch[m.ID] = true
		k := keys[m.Key]
		if k == nil {
			k = &batchKey{Key: m.Key}
			keys[m.Key] = k
			order = append(order, k)
		}
		k.Hi, k.N = max(k.Hi, m.ID), k.N+1
	}
	for _, k := range order {
		if lo, ok := done[k.Key]; ok && lo < k.Hi {
			k.Lo = lo
		}
	}
	return order, keys, inBatch
}

// HoldBack implements outboxdriver.KeyOrderer. One statement reads the blockers of
// the batch's keys; a second, only when a message is held, moves the held
// rows' next_retry_at. Neither reads a key's SENT history beyond the rows
// the dialect's index cannot tell from NEW ones (PostgreSQL: those above the
// low-water mark).
func (s *Store) HoldBack(ctx context.Context, msgs []outbox.Message, p outboxdriver.HoldParams) ([]bool, error) {
	order, keys, inBatch := batchKeysOf(msgs, p.Done)
	if len(order) == 0 {
		return nil, nil
	}
	for _, m := range p.InFlight {
		if k := keys[m.Key]; k != nil && m.ID < k.Hi && !inBatch[m.ID] {
			inBatch[m.ID] = true
			k.N++
		}
	}
	first, err := s.blockers(ctx, order, inBatch, p.DeadBlocks, p.Whole)
	if err != nil {
		return nil, s.wrap("key order: blockers", err)
	}
	if len(first) == 0 {
		return nil, nil
	}
	var held []bool
	var pairs [][2]int64
	for i, m := range msgs {
		if b, ok := first[m.Key]; ok && m.Key != "" && b < m.ID {
			if held == nil {
				held = make([]bool, len(msgs))
			}
			held[i] = true
			pairs = append(pairs, [2]int64{m.ID, b})
		}
	}
	if len(pairs) == 0 {
		return nil, nil
	}
	b, _ := json.Marshal(pairs)
	args := []any{string(b), p.DeadWait.Milliseconds(), p.HeldWait.Milliseconds()}
	if s.ko.BlockerState != "" {
		v, err := s.withBlockerState(ctx, string(b), pairs)
		if err != nil {
			return nil, s.wrap("key order: blocker state", err)
		}
		args = []any{v, p.HeldWait.Milliseconds(), p.DeadWait.Milliseconds()}
	}
	if _, err := s.db.Exec(ctx, s.ko.Hold, args...); err != nil {
		return nil, s.wrap("key order: hold", err)
	}
	return held, nil
}

// withBlockerState reads the state of the blockers of pairs ([id, blocker])
// and returns hold's argument: a JSON array of [id, status, next_retry_at].
// A blocker gone (deleted) counts as no longer NEW.
func (s *Store) withBlockerState(ctx context.Context, pairsJSON string, pairs [][2]int64) (string, error) {
	rows, err := s.db.Query(ctx, s.ko.BlockerState, pairsJSON)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	type state struct {
		status int
		next   string
	}
	states := map[int64]state{}
	for rows.Next() {
		var id int64
		var st state
		if err := rows.Scan(&id, &st.status, &st.next); err != nil {
			return "", err
		}
		states[id] = st
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	out := make([][3]any, len(pairs))
	for i, p := range pairs {
		st, ok := states[p[1]]
		if !ok {
			st = state{status: 1, next: "1970-01-01 00:00:00"}
		}
		out[i] = [3]any{p[0], st.status, st.next}
	}
	b, _ := json.Marshal(out)
	return string(b), nil
}

// blockers returns, per key of the batch that has one, the smallest id of a
// row of that key outside the batch, below the key's highest id in it, that
// is NEW (or, with dead, DEAD). With whole (HoldParams.Whole), a dialect
// that can looks only at requeued and DEAD rows.
func (s *Store) blockers(ctx context.Context, keys []*batchKey, inBatch map[int64]bool, dead, whole bool) (map[string]int64, error) {
	deadStatus := 3 // no row has status 3: no DEAD row blocks
	if dead {
		deadStatus = 2
	}
	args := s.blockersArgs(keys, deadStatus, !whole)
	var first map[string]int64
	his := make(map[string]int64, len(keys))
	for _, k := range keys {
		his[k.Key] = k.Hi
	}
	scan := func(rows Rows) error {
		defer rows.Close()
		var key string
		var id int64
		for rows.Next() {
			if err := rows.Scan(&key, &id); err != nil {
				return err
			}
			if inBatch[id] || id >= his[key] {
				continue
			}
			if first == nil {
				first = map[string]int64{}
			}
			if f, ok := first[key]; !ok || id < f {
				first[key] = id
			}
		}
		return rows.Err()
	}
	q := s.ko.Blockers
	if s.ko.BlockersSetup == "" {
		rows, err := s.db.Query(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		return first, scan(rows)
	}
	if pl, ok := s.db.(TxPipeliner); ok {
		// Safe to repeat: it only reads.
		_, err := onLiveConnection(ctx, s, func() (struct{}, error) {
			first = nil
			return struct{}{}, pl.QueryCommitted(ctx, []string{s.ko.BlockersSetup}, q, args, scan)
		})
		return first, err
	}
	tx, err := s.beginRetrying(ctx, s.beginWith(s.ko.BlockersSetup))
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return first, scan(rows)
}

// blockersArgs returns the arguments of the dialect's Blockers statement
// for keys, the status of a row that blocks when DEAD (3 for none), and
// whether every key's NEW rows are walked (PostgreSQL: not with
// HoldParams.Whole).
func (s *Store) blockersArgs(keys []*batchKey, deadStatus int, walk bool) []any {
	b, _ := json.Marshal(keys)
	switch s.c.name {
	case "mysql":
		return []any{string(b), string(b), deadStatus}
	case "postgres":
		return []any{string(b), deadStatus, walk}
	}
	return []any{string(b), deadStatus}
}

// deadKeys returns the keys of the DEAD rows f selects.
func (s *Store) deadKeys(ctx context.Context, f outbox.DeadFilter) ([]string, error) {
	rows, err := s.db.Query(ctx, s.ko.DeadKeys, jsonArray(f.MsgIDs), f.All, f.Topic)
	if err != nil {
		return nil, s.wrap("key order: dead keys", err)
	}
	keys, err := scanStrings(rows)
	return keys, s.wrap("key order: dead keys", err)
}

// releaseKeys makes the NEW rows of keys that wait for a later time due at
// once, after a DEAD message of those keys was retried or dropped: rows held
// back behind it (RelayConfig.StopKeyAtDead) then go without waiting. A row
// waiting out a backoff of its own is tried early, once.
func (s *Store) releaseKeys(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := s.db.Exec(ctx, s.ko.Release, jsonArray(keys))
	return s.wrap("key order: release", err)
}

// releaseAfterMark makes the rows held behind the keyed messages of a
// finished batch that went SENT or DEAD due at once (releaseAfter). Only a
// message that had waited (it failed before, or was held itself: its
// next_retry_at is past its creation) can have rows held far behind it, so
// a batch of keys that never waited costs nothing. It runs after the marks'
// transaction, in its own, so that it never holds row locks with the marks
// (on MySQL, with the lease table's). When it fails, the held rows go when
// their hold wait runs out.
func (s *Store) releaseAfterMark(ctx context.Context, msgs []outbox.Message, outcomes []outbox.Outcome) {
	// One pair per key: its smallest marked id, whose walk covers the others.
	first := map[string]int64{}
	var keys []string
	for i, m := range msgs {
		k := outcomes[i].Kind
		if m.Key == "" || (k != outbox.OutcomeSent && k != outbox.OutcomeDead) {
			continue
		}
		if m.Retries == 0 && !m.NextRetryAt.After(m.CreatedAt) {
			continue
		}
		if id, ok := first[m.Key]; !ok {
			keys = append(keys, m.Key)
		} else if id <= m.ID {
			continue
		}
		first[m.Key] = m.ID
	}
	if len(keys) == 0 {
		return
	}
	out := make([][2]any, len(keys))
	for i, k := range keys {
		out[i] = [2]any{k, first[k]}
	}
	b, _ := json.Marshal(out)
	if s.ko.BlockersSetup == "" {
		s.db.Exec(ctx, s.ko.ReleaseAfter, string(b))
		return
	}
	tx, err := s.beginWith(s.ko.BlockersSetup)(ctx)
	if err != nil {
		return
	}
	if _, err := tx.Exec(ctx, s.ko.ReleaseAfter, string(b)); err != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		return
	}
	tx.Commit(ctx)
}

var _ outboxdriver.KeyOrderer = (*Store)(nil)

// ExplainHoldBack returns the database's plan of HoldBack's blockers
// statement for msgs and the keys' done ids (outboxdriver.HoldParams.Done, nil for
// none), one line per plan line; on PostgreSQL it runs the statement (it
// only reads) and the plan carries its timings and buffers.
func (s *Store) ExplainHoldBack(ctx context.Context, msgs []outbox.Message, done map[string]int64) (string, error) {
	keys, _, _ := batchKeysOf(msgs, done)
	args := s.blockersArgs(keys, 2, true)
	prefix := s.c.Explain + " "
	if s.c.name == "postgres" {
		prefix = "EXPLAIN (ANALYZE, BUFFERS) "
	}
	begin := s.db.Begin
	if s.ko.BlockersSetup != "" {
		begin = s.beginWith(s.ko.BlockersSetup)
	}
	tx, err := begin(ctx)
	if err != nil {
		return "", s.wrap("explain hold-back", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, prefix+s.ko.Blockers, args...)
	if err != nil {
		return "", s.wrap("explain hold-back", err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		cols, err := rowStrings(rows)
		if err != nil {
			return "", s.wrap("explain hold-back", err)
		}
		plan.WriteString(strings.Join(cols, " ") + "\n")
	}
	return plan.String(), s.wrap("explain hold-back", rows.Err())
}

package sqlstore

import (
	"context"
	"sort"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// RescanMark returns the low-water mark of the relays' rescans; ok is false
// for a dialect that has none (MySQL, SQLite).
var _ outboxdriver.RescanMarker = (*Store)(nil)

func (s *Store) RescanMark(ctx context.Context) (m outboxdriver.RescanMark, ok bool, err error) {
	if s.c.RescanMark == "" {
		return m, false, nil
	}
	var behind float64
	found, err := queryRow(ctx, s.db, s.c.RescanMark, nil, &m.ID, &m.NewestID, &behind)
	if err != nil {
		return m, false, s.wrap("rescan mark", err)
	}
	m.Behind = time.Duration(behind * float64(time.Second))
	return m, found, nil
}

// Stats implements outboxdriver.Store: the NEW rows as Backlog reads them, the
// DEAD rows through their index, and Sent estimated from the two ends of
// the primary key.
func (s *Store) Stats(ctx context.Context) (outbox.Stats, error) {
	st := outbox.Stats{SentEstimated: true}
	q, done, err := s.backlogQuerier(ctx)
	if err != nil {
		return st, s.wrap("stats", err)
	}
	defer done()
	byTopic := map[string]*outbox.TopicStats{}
	topic := func(name string) *outbox.TopicStats {
		ts := byTopic[name]
		if ts == nil {
			ts = &outbox.TopicStats{Topic: name}
			byTopic[name] = ts
		}
		return ts
	}
	err = eachRow(ctx, q, s.c.StatsPending, func(rows Rows) error {
		var name string
		var n int64
		var oldest, now lenientTime
		if err := rows.Scan(&name, &n, &oldest, &now); err != nil {
			return err
		}
		ts := topic(name)
		ts.Pending = n
		st.Pending += n
		if n > 0 && oldest.Valid && now.Valid {
			ts.OldestPendingAge = max(now.Time.Sub(oldest.Time), 0)
			st.OldestPendingAge = max(st.OldestPendingAge, ts.OldestPendingAge)
		}
		return nil
	})
	if err == nil {
		err = eachRow(ctx, q, s.c.StatsDead, func(rows Rows) error {
			var name string
			var n int64
			if err := rows.Scan(&name, &n); err != nil {
				return err
			}
			topic(name).Dead = n
			st.Dead += n
			return nil
		})
	}
	var span int64
	if err == nil {
		_, err = queryRow(ctx, q, s.c.StatsSpan, nil, &span)
	}
	if err != nil {
		return outbox.Stats{}, s.wrap("stats", err)
	}
	st.Sent = max(span-st.Pending-st.Dead, 0)
	for _, ts := range byTopic {
		st.Topics = append(st.Topics, *ts)
	}
	sort.Slice(st.Topics, func(i, j int) bool { return st.Topics[i].Topic < st.Topics[j].Topic })
	return st, nil
}

var _ outboxdriver.BacklogReader = (*Store)(nil)

// Backlog implements outboxdriver.BacklogReader: it reads the NEW rows and the
// DEAD rows, each through an index.
func (s *Store) Backlog(ctx context.Context) (outboxdriver.Backlog, error) {
	var b outboxdriver.Backlog
	q, done, err := s.backlogQuerier(ctx)
	if err != nil {
		return b, s.wrap("backlog", err)
	}
	defer done()
	var oldest, now lenientTime
	if _, err := queryRow(ctx, q, s.c.Backlog, nil, &b.Pending, &oldest, &now); err != nil {
		return b, s.wrap("backlog", err)
	}
	if b.Pending > 0 && oldest.Valid && now.Valid {
		b.OldestPendingAge = max(now.Time.Sub(oldest.Time), 0)
	}
	if _, err := queryRow(ctx, q, s.c.DeadCount, nil, &b.Dead); err != nil {
		return b, s.wrap("backlog", err)
	}
	b.DeadCounted = true
	return b, nil
}

// backlogQuerier is where Backlog's statements run: a transaction that
// begins with the dialect's BacklogSetup (rolled back by done), or else the
// pool, since a transaction would take SQLite's write lock at its start.
func (s *Store) backlogQuerier(ctx context.Context) (q Querier, done func(), err error) {
	if s.c.BacklogSetup == "" {
		return s.db, func() {}, nil
	}
	tx, err := s.beginRetrying(ctx, s.beginWith(s.c.BacklogSetup))
	if err != nil {
		return nil, nil, err
	}
	return tx, func() { tx.Rollback(context.WithoutCancel(ctx)) }, nil
}

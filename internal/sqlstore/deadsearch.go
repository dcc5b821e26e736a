package sqlstore

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

var (
	_ outboxdriver.DeadSearcher       = (*Store)(nil)
	_ outboxdriver.TopicBacklogReader = (*Store)(nil)
)

// deadColumns are the columns SearchDead reads, as listDead does.
const deadColumns = `id, msg_id, topic, msg_key, status, retries, next_retry_at, created_at, sent_at, last_error, dead_at`

// query builds a statement of the dialect with its arguments, numbering
// PostgreSQL's placeholders.
type query struct {
	pg   bool
	args []any
}

func (q *query) arg(v any) string {
	q.args = append(q.args, v)
	if q.pg {
		return fmt.Sprintf("$%d", len(q.args))
	}
	return "?"
}

// table is the quoted outbox table, with its schema when it has one.
func (s *Store) table() string { return s.c.qualified(s.tables.Outbox) }

// bareName is a table's name without its schema: the name that the
// table's indexes are named after.
func bareName(name string) string {
	_, table, _ := outboxdriver.SplitTableName(name)
	return table
}

// deadRowsOf names the DEAD rows the way the dialect's DEAD index does:
// PostgreSQL's names dead_at, SQLite's and MySQL's status.
func (s *Store) deadRowsOf() string {
	if s.c.name == "postgres" {
		return s.c.parts["dead_rows"]
	}
	return "status = 2"
}

// deadTime is t as a parameter compared with dead_at: SQLite keeps times
// as text, MySQL as a DATETIME in UTC.
func (s *Store) deadTime(t time.Time) any {
	switch s.c.name {
	case "sqlite":
		return t.UTC().Format("2006-01-02 15:04:05.000")
	case "mysql":
		return t.UTC().Format("2006-01-02 15:04:05.000000")
	}
	return t
}

// deadFilters returns q's conditions other than the id bounds, each
// starting with " AND ".
func (s *Store) deadFilters(b *query, q outboxdriver.DeadQuery) string {
	var w strings.Builder
	if q.MsgID != "" {
		w.WriteString(" AND msg_id = " + b.arg(q.MsgID))
	}
	if q.Topic != "" {
		w.WriteString(" AND topic = " + b.arg(q.Topic))
	}
	if q.Key != "" {
		w.WriteString(" AND msg_key = " + b.arg(q.Key))
	}
	if q.ErrorContains != "" {
		p := b.arg(strings.ToLower(q.ErrorContains))
		switch s.c.name {
		case "postgres":
			w.WriteString(" AND strpos(lower(coalesce(last_error, '')), " + p + ") > 0")
		case "mysql":
			w.WriteString(" AND LOCATE(" + p + ", LOWER(coalesce(last_error, ''))) > 0")
		default:
			w.WriteString(" AND instr(lower(coalesce(last_error, '')), " + p + ") > 0")
		}
	}
	if !q.DeadFrom.IsZero() {
		w.WriteString(" AND dead_at >= " + b.arg(s.deadTime(q.DeadFrom)))
	}
	if !q.DeadUntil.IsZero() {
		w.WriteString(" AND dead_at <= " + b.arg(s.deadTime(q.DeadUntil)))
	}
	return w.String()
}

// idBounds returns q's id bounds, each starting with " AND ".
func idBounds(b *query, q outboxdriver.DeadQuery) string {
	w := " AND id > " + b.arg(q.AfterID)
	if q.MaxID > 0 {
		w += " AND id <= " + b.arg(q.MaxID)
	}
	return w
}

// SearchDead implements outboxdriver.DeadSearcher. A search by msg_id reads
// that row through the msg_id key; any other reads a window of at most
// q.Scan DEAD rows in id order through the DEAD index and filters it.
func (s *Store) SearchDead(ctx context.Context, q outboxdriver.DeadQuery) ([]outbox.Message, int64, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	if q.Scan <= 0 {
		q.Scan = 10000
	}
	b := &query{pg: s.c.name == "postgres"}
	var stmt string
	if q.MsgID != "" {
		stmt = `SELECT ` + deadColumns + ` FROM ` + s.table() + ` WHERE ` + s.deadRowsOf() + idBounds(b, q) + s.deadFilters(b, q)
	} else {
		inner := `SELECT ` + deadColumns + ` FROM ` + s.table() + ` WHERE ` + s.deadRowsOf() + idBounds(b, q) +
			` ORDER BY id LIMIT ` + b.arg(q.Scan)
		stmt = `SELECT ` + deadColumns + ` FROM (` + inner + `) AS d WHERE 1 = 1` + s.deadFilters(b, q) +
			` ORDER BY id LIMIT ` + b.arg(q.Limit)
	}
	msgs, err := s.scanMessages(ctx, stmt, b.args)
	if err != nil || q.MsgID != "" {
		return msgs, 0, s.wrap("search dead messages", err)
	}
	if len(msgs) == q.Limit {
		return msgs, msgs[len(msgs)-1].ID, nil
	}
	// Fewer than Limit matched: was the window full? Then the next page
	// starts past it.
	w := &query{pg: b.pg}
	window := `SELECT count(*), coalesce(max(id), 0) FROM (SELECT id FROM ` + s.table() + ` WHERE ` + s.deadRowsOf() +
		idBounds(w, q) + ` ORDER BY id LIMIT ` + w.arg(q.Scan) + `) AS d`
	var n, last int64
	if _, err := queryRow(ctx, s.db, window, w.args, &n, &last); err != nil {
		return nil, 0, s.wrap("search dead messages", err)
	}
	if n == int64(q.Scan) {
		return msgs, last, nil
	}
	return msgs, 0, nil
}

// CountDead implements outboxdriver.DeadSearcher. It walks the DEAD index in id
// order and stops after limit+1 matches.
func (s *Store) CountDead(ctx context.Context, q outboxdriver.DeadQuery, limit int) (outboxdriver.DeadCount, error) {
	var c outboxdriver.DeadCount
	q.AfterID = 0
	b := &query{pg: s.c.name == "postgres"}
	stmt := `SELECT count(*), coalesce(max(id), 0), max(dead_at) FROM (SELECT id, dead_at FROM ` + s.table() +
		` WHERE ` + s.deadRowsOf() + idBounds(b, q) + s.deadFilters(b, q) + ` ORDER BY id LIMIT ` + b.arg(limit+1) + `) AS d`
	var last lenientTime
	if _, err := queryRow(ctx, s.db, stmt, b.args, &c.Count, &c.MaxID, &last); err != nil {
		return c, s.wrap("count dead messages", err)
	}
	c.LastDeadAt = last.Time
	return c, nil
}

func (s *Store) scanMessages(ctx context.Context, stmt string, args []any) ([]outbox.Message, error) {
	rows, err := s.db.Query(ctx, stmt, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []outbox.Message
	for rows.Next() {
		var m outbox.Message
		var key, lastErr textValue
		var status int16
		var next, created, sent, dead lenientTime
		if err := rows.Scan(&m.ID, &m.MsgID, &m.Topic, &key, &status, &m.Retries, &next, &created, &sent, &lastErr, &dead); err != nil {
			return nil, err
		}
		m.Key, m.LastError, m.Status = key.s, lastErr.s, outbox.Status(status)
		m.NextRetryAt, m.CreatedAt, m.SentAt, m.DeadAt = next.Time, created.Time, sent.Time, dead.Time
		out = append(out, m)
	}
	return out, rows.Err()
}

// topicPending is the per-topic form of each dialect's backlog statement:
// it reads the NEW rows through the same indexes.
func (s *Store) topicPending() string {
	t := s.table()
	switch s.c.name {
	case "postgres":
		mark := s.c.parts["backlog_mark"]
		return `SELECT p.topic, count(*), min(p.created_at), now() FROM (
  SELECT o.topic, o.created_at FROM ` + t + ` AS o
  WHERE o.next_retry_at > o.created_at AND o.status = 0 AND o.id <= (` + mark + `)
  UNION ALL
  SELECT o.topic, o.created_at FROM ` + t + ` AS o WHERE o.id > (` + mark + `) AND o.status = 0
) AS p GROUP BY p.topic`
	case "mysql":
		return `SELECT topic, count(*), min(created_at), UTC_TIMESTAMP(6) FROM ` + t + ` FORCE INDEX (` +
			s.c.quote(bareName(s.tables.Outbox)+"_pending_idx") + `) WHERE status = 0 GROUP BY topic`
	}
	return `SELECT topic, count(*), min(created_at), strftime('%Y-%m-%d %H:%M:%f', 'now') FROM ` + t + ` WHERE status = 0 GROUP BY topic`
}

// TopicBacklog implements outboxdriver.TopicBacklogReader.
func (s *Store) TopicBacklog(ctx context.Context) ([]outboxdriver.TopicBacklog, int64, error) {
	q, done, err := s.backlogQuerier(ctx)
	if err != nil {
		return nil, 0, s.wrap("topic backlog", err)
	}
	defer done()
	byTopic := map[string]*outboxdriver.TopicBacklog{}
	get := func(topic string) *outboxdriver.TopicBacklog {
		if byTopic[topic] == nil {
			byTopic[topic] = &outboxdriver.TopicBacklog{Topic: topic}
		}
		return byTopic[topic]
	}
	rows, err := q.Query(ctx, s.topicPending())
	if err != nil {
		return nil, 0, s.wrap("topic backlog", err)
	}
	for rows.Next() {
		var topic string
		var n int64
		var oldest, now lenientTime
		if err := rows.Scan(&topic, &n, &oldest, &now); err != nil {
			rows.Close()
			return nil, 0, s.wrap("topic backlog", err)
		}
		tb := get(topic)
		tb.Pending = n
		if oldest.Valid && now.Valid {
			tb.OldestPendingAge = max(now.Time.Sub(oldest.Time), 0)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, s.wrap("topic backlog", err)
	}
	if rows, err = q.Query(ctx, `SELECT topic, count(*) FROM `+s.table()+` WHERE `+s.deadRowsOf()+` GROUP BY topic`); err != nil {
		return nil, 0, s.wrap("topic backlog", err)
	}
	for rows.Next() {
		var topic string
		var n int64
		if err := rows.Scan(&topic, &n); err != nil {
			rows.Close()
			return nil, 0, s.wrap("topic backlog", err)
		}
		get(topic).Dead = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, s.wrap("topic backlog", err)
	}
	var maxID int64
	if _, err := queryRow(ctx, q, `SELECT coalesce(max(id), 0) FROM `+s.table(), nil, &maxID); err != nil {
		return nil, 0, s.wrap("topic backlog", err)
	}
	out := make([]outboxdriver.TopicBacklog, 0, len(byTopic))
	for _, tb := range byTopic {
		out = append(out, *tb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out, maxID, nil
}

// ExplainConsole returns the plans of the console's statements (SearchDead's
// window and its msg_id lookup, CountDead with every filter, TopicBacklog's
// two reads), each after a line "-- name", for tests that check that none
// reads the table through.
func (s *Store) ExplainConsole(ctx context.Context) (string, error) {
	all := outboxdriver.DeadQuery{Topic: "t", Key: "k", ErrorContains: "e", DeadFrom: time.Unix(1, 0), DeadUntil: time.Now(), MaxID: 1 << 40}
	pg := s.c.name == "postgres"
	win := &query{pg: pg}
	window := `SELECT ` + deadColumns + ` FROM (SELECT ` + deadColumns + ` FROM ` + s.table() + ` WHERE ` + s.deadRowsOf() +
		idBounds(win, outboxdriver.DeadQuery{}) + ` ORDER BY id LIMIT ` + win.arg(10000) + `) AS d WHERE 1 = 1` + s.deadFilters(win, all) +
		` ORDER BY id LIMIT ` + win.arg(100)
	one := &query{pg: pg}
	byID := `SELECT ` + deadColumns + ` FROM ` + s.table() + ` WHERE ` + s.deadRowsOf() + idBounds(one, outboxdriver.DeadQuery{}) +
		s.deadFilters(one, outboxdriver.DeadQuery{MsgID: "m"})
	cnt := &query{pg: pg}
	count := `SELECT count(*) FROM (SELECT id, dead_at FROM ` + s.table() + ` WHERE ` + s.deadRowsOf() + idBounds(cnt, all) +
		s.deadFilters(cnt, all) + ` ORDER BY id LIMIT ` + cnt.arg(100001) + `) AS d`
	q, done, err := s.backlogQuerier(ctx)
	if err != nil {
		return "", s.wrap("explain console", err)
	}
	defer done()
	return s.explainAll(ctx, "explain console", []explained{
		{"search", s.db, window, win.args},
		{"search by msg_id", s.db, byID, one.args},
		{"count", s.db, count, cnt.args},
		{"topic pending", q, s.topicPending(), nil},
		{"topic dead", q, `SELECT topic, count(*) FROM ` + s.table() + ` WHERE ` + s.deadRowsOf() + ` GROUP BY topic`, nil},
	})
}

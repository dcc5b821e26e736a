package outboxmysql

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/sqlstore"
)

// columns maps the outbox table's columns to their places in a row event.
type columns struct {
	names []string // in the table's order
	// place holds each known column's index, -1 when the table has none.
	id, msgID, topic, key, payload, headers, status, retries int
	next, created, sent, lastErr, dead                       int
}

// loadColumns reads the outbox table's column order from
// information_schema: the table map event names the columns only when
// binlog_row_metadata=FULL.
func (b *BinlogDriver) loadColumns(ctx context.Context) (*columns, error) {
	rows, err := b.db.QueryContext(ctx, `SELECT COLUMN_NAME FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, b.schema, b.table)
	if err != nil {
		return nil, fmt.Errorf("outboxmysql: binlog: read the outbox table's columns: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("outboxmysql: binlog: %w: no table %s.%s (or no privilege to see it); run migrate", outbox.ErrSchemaMissing, b.schema, b.table)
	}
	return newColumns(names)
}

func newColumns(names []string) (*columns, error) {
	c := &columns{names: names}
	place := map[string]*int{
		"id": &c.id, "msg_id": &c.msgID, "topic": &c.topic, "msg_key": &c.key,
		"payload": &c.payload, "headers": &c.headers, "status": &c.status,
		"retries": &c.retries, "next_retry_at": &c.next, "created_at": &c.created,
		"sent_at": &c.sent, "last_error": &c.lastErr, "dead_at": &c.dead,
	}
	for _, p := range place {
		*p = -1
	}
	for i, n := range names {
		if p, ok := place[n]; ok {
			*p = i
		}
	}
	for _, n := range []string{"id", "msg_id", "topic", "payload"} {
		if *place[n] < 0 {
			return nil, fmt.Errorf("outboxmysql: binlog: the outbox table has no column %s", n)
		}
	}
	return c, nil
}

// forTable returns the columns of a row event of the outbox table: the
// names in the table map when it has them, else those read from
// information_schema, read again once when their count differs (the table
// was altered since).
func (r *reader) forTable(ctx context.Context, tm *replication.TableMapEvent) (*columns, error) {
	if names := tm.ColumnNameString(); len(names) == int(tm.ColumnCount) && len(names) > 0 {
		if r.cols == nil || !equalNames(r.cols.names, names) {
			c, err := newColumns(names)
			if err != nil {
				return nil, err
			}
			r.cols = c
		}
		return r.cols, nil
	}
	if r.cols != nil && len(r.cols.names) == int(tm.ColumnCount) {
		return r.cols, nil
	}
	c, err := r.b.loadColumns(ctx)
	if err != nil {
		return nil, err
	}
	if len(c.names) != int(tm.ColumnCount) {
		return nil, fmt.Errorf("outboxmysql: binlog: the outbox table has %d columns and its binlog rows %d: "+
			"it was altered; set binlog_row_metadata=FULL to read rows logged before an ALTER", len(c.names), tm.ColumnCount)
	}
	r.cols = c
	return c, nil
}

func equalNames(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// message decodes one inserted row.
func (c *columns) message(row []any) (outbox.Message, error) {
	var m outbox.Message
	var err error
	at := func(i int) any {
		if i < 0 || i >= len(row) {
			return nil
		}
		return row[i]
	}
	if m.ID, err = asInt(at(c.id)); err != nil {
		return m, fmt.Errorf("id: %w", err)
	}
	m.MsgID, m.Topic, m.Key = asString(at(c.msgID)), asString(at(c.topic)), asString(at(c.key))
	m.Payload = asBytes(at(c.payload))
	if m.Headers, err = sqlstore.DecodeHeaders(asBytes(at(c.headers))); err != nil {
		return m, fmt.Errorf("headers: %w", err)
	}
	status, err := asInt(at(c.status))
	if err != nil {
		return m, fmt.Errorf("status: %w", err)
	}
	m.Status = outbox.Status(status)
	retries, err := asInt(at(c.retries))
	if err != nil {
		return m, fmt.Errorf("retries: %w", err)
	}
	m.Retries = int(retries)
	m.LastError = asString(at(c.lastErr))
	for _, f := range []struct {
		dst *time.Time
		i   int
	}{{&m.NextRetryAt, c.next}, {&m.CreatedAt, c.created}, {&m.SentAt, c.sent}, {&m.DeadAt, c.dead}} {
		if *f.dst, err = asTime(at(f.i)); err != nil {
			return m, err
		}
	}
	return m, nil
}

// asInt converts an integer column's value; NULL is 0.
func asInt(v any) (int64, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		return int64(x), nil
	case int:
		return int64(x), nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("unexpected %T", v)
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func asBytes(v any) []byte {
	switch x := v.(type) {
	case []byte:
		return append([]byte(nil), x...)
	case string:
		return []byte(x)
	}
	return nil
}

// asTime converts a DATETIME(6) column's value (UTC); NULL and the zero
// date are the zero time.
func asTime(v any) (time.Time, error) {
	switch x := v.(type) {
	case nil:
		return time.Time{}, nil
	case time.Time:
		return x.UTC(), nil
	case string:
		if x == "" || strings.HasPrefix(x, "0000-00-00") {
			return time.Time{}, nil
		}
		t, err := time.ParseInLocation("2006-01-02 15:04:05.999999", x, time.UTC)
		if err != nil {
			return time.Time{}, fmt.Errorf("time %q: %w", x, err)
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("unexpected time %T", v)
}

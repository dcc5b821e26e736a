package admin

import (
	"encoding/json"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/redact"
)

// Message is a message as the admin handler serves it, and as
// `outbox dead list --json` and `outbox dead show --json` print it. Times are
// UTC and absent when the row has none; Payload is absent in lists.
type Message struct {
	ID          int64             `json:"id"`
	MsgID       string            `json:"msg_id"`
	Topic       string            `json:"topic"`
	Key         string            `json:"key,omitempty"`
	Status      string            `json:"status"`
	Retries     int               `json:"retries"`
	CreatedAt   *time.Time        `json:"created_at,omitempty"`
	NextRetryAt *time.Time        `json:"next_retry_at,omitempty"`
	SentAt      *time.Time        `json:"sent_at,omitempty"`
	DeadAt      *time.Time        `json:"dead_at,omitempty"`
	LastError   string            `json:"last_error,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Payload     json.RawMessage   `json:"payload,omitempty"`
}

// MessageOf returns m as the admin handler serves it. A payload that is not
// valid JSON (a row written by hand) is served as a JSON string, so that the
// response stays valid JSON. The credentials of every URL in LastError
// (passwords, tokens, secret query values) are masked, as the publishers
// mask them today, so that a row written by an older release, or by a
// publisher that quoted a URL in full, does not serve them.
func MessageOf(m outbox.Message) Message {
	out := Message{ID: m.ID, MsgID: m.MsgID, Topic: m.Topic, Key: m.Key, Status: m.Status.String(),
		Retries: m.Retries, CreatedAt: utc(m.CreatedAt), NextRetryAt: utc(m.NextRetryAt), SentAt: utc(m.SentAt),
		DeadAt: utc(m.DeadAt), LastError: redact.Text(m.LastError), Headers: m.Headers}
	if len(m.Payload) > 0 {
		if json.Valid(m.Payload) {
			out.Payload = m.Payload
		} else {
			out.Payload, _ = json.Marshal(string(m.Payload))
		}
	}
	return out
}

func utc(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// Stats is an outbox table's counts as the admin handler serves them, and as
// `outbox stats --json` prints them.
type Stats struct {
	// Table is the outbox table's name.
	Table                   string  `json:"table"`
	Pending                 int64   `json:"pending"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	// Sent is an estimate when SentEstimated is true (see outbox.Stats).
	Sent          int64        `json:"sent"`
	SentEstimated bool         `json:"sent_estimated"`
	Dead          int64        `json:"dead"`
	Topics        []TopicStats `json:"topics"`
}

// TopicStats are the counts of one topic (no SENT count).
type TopicStats struct {
	Topic                   string  `json:"topic"`
	Pending                 int64   `json:"pending"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	Dead                    int64   `json:"dead"`
}

// StatsOf returns st, the counts of the outbox table named table, as the
// admin handler serves them. Topics is an empty list, never null.
func StatsOf(table string, st outbox.Stats) Stats {
	out := Stats{Table: table, Pending: st.Pending, Sent: st.Sent, SentEstimated: st.SentEstimated, Dead: st.Dead,
		OldestPendingAgeSeconds: st.OldestPendingAge.Seconds(), Topics: make([]TopicStats, 0, len(st.Topics))}
	for _, t := range st.Topics {
		out.Topics = append(out.Topics, TopicStats{Topic: t.Topic, Pending: t.Pending, Dead: t.Dead,
			OldestPendingAgeSeconds: t.OldestPendingAge.Seconds()})
	}
	return out
}

// Backlog is what GET /backlog serves: the pending count, the oldest
// pending message's age and, where the store counts them, the DEAD count.
type Backlog struct {
	Table                   string  `json:"table"`
	Pending                 int64   `json:"pending"`
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	// Dead is absent when the store does not count DEAD messages cheaply
	// (outboxdriver.Backlog.DeadCounted).
	Dead *int64 `json:"dead,omitempty"`
}

// MessageList is what GET /messages serves.
type MessageList struct {
	Messages []Message `json:"messages"`
	// NextAfterID, when present, is the after_id of the next page: the page
	// was full, so there may be more.
	NextAfterID *int64 `json:"next_after_id,omitempty"`
}

// Selection is the body of POST /dead/retry and POST /dead/drop: either
// MsgIDs, or All (of Topic, when set). Dropping with All needs Yes as well,
// as `outbox dead drop --all` needs --yes.
type Selection struct {
	MsgIDs []string `json:"msg_ids,omitempty"`
	All    bool     `json:"all,omitempty"`
	Topic  string   `json:"topic,omitempty"`
	Yes    bool     `json:"yes,omitempty"`
}

// Changed is the answer to POST /dead/retry and POST /dead/drop.
type Changed struct {
	// Retried or Dropped is how many DEAD messages moved back to NEW or
	// were deleted; the other is absent.
	Retried *int64 `json:"retried,omitempty"`
	Dropped *int64 `json:"dropped,omitempty"`
	// Unmatched, when msg_ids were given, is how many of them were not
	// DEAD, not of Topic, or not in the table.
	Unmatched int64 `json:"unmatched,omitempty"`
}

// Error is the body of every answer that is not a success.
type Error struct {
	Error string `json:"error"`
}

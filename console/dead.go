package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/admin"
	"github.com/outbox-go/outbox/internal/errsig"
	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/outboxdriver"
)

// Filter is a search of DEAD messages, as the console's calls take it in
// their query (msg_id, topic, key, error, from, until) and a bulk action
// in its body.
type Filter struct {
	MsgID string `json:"msg_id,omitempty"`
	Topic string `json:"topic,omitempty"`
	Key   string `json:"key,omitempty"`
	// Error selects the messages whose last error contains it, ignoring case.
	Error string `json:"error,omitempty"`
	// From and Until bound dead_at, both inclusive.
	From  *time.Time `json:"from,omitempty"`
	Until *time.Time `json:"until,omitempty"`
}

func (f Filter) query() outboxdriver.DeadQuery {
	q := outboxdriver.DeadQuery{MsgID: f.MsgID, Topic: f.Topic, Key: f.Key, ErrorContains: f.Error}
	if f.From != nil {
		q.DeadFrom = *f.From
	}
	if f.Until != nil {
		q.DeadUntil = *f.Until
	}
	return q
}

func (f Filter) check() error {
	for name, v := range map[string]string{"msg_id": f.MsgID, "topic": f.Topic, "key": f.Key, "error": f.Error} {
		if len(v) > 256 {
			return fmt.Errorf("%s is %d bytes long; give at most 256", name, len(v))
		}
	}
	if f.From != nil && f.Until != nil && f.Until.Before(*f.From) {
		return errors.New("until is before from")
	}
	return nil
}

// parseQuery reads a filter and the names in extra from q; it refuses a
// parameter it does not know, so that a misspelt one does not widen a
// search unnoticed.
func parseQuery(q url.Values, extra ...string) (Filter, map[string]string, error) {
	var f Filter
	more := map[string]string{}
	for name, vals := range q {
		if len(vals) != 1 {
			return f, nil, fmt.Errorf("query parameter %s is given %d times; give it once", name, len(vals))
		}
		v := vals[0]
		switch name {
		case "msg_id":
			f.MsgID = v
		case "topic":
			f.Topic = v
		case "key":
			f.Key = v
		case "error":
			f.Error = v
		case "from", "until":
			if v == "" {
				continue
			}
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, nil, fmt.Errorf("%s=%q: give a time as RFC 3339, such as 2026-01-02T15:04:05Z", name, v)
			}
			if name == "from" {
				f.From = &t
			} else {
				f.Until = &t
			}
		default:
			known := false
			for _, e := range extra {
				known = known || e == name
			}
			if !known {
				return f, nil, fmt.Errorf("unknown query parameter %q; use msg_id, topic, key, error, from, until, %s", name, strings.Join(extra, ", "))
			}
			more[name] = v
		}
	}
	return f, more, f.check()
}

// listItem is a DEAD message in a list: no payload, headers or full error.
type listItem struct {
	ID        int64      `json:"id"`
	MsgID     string     `json:"msg_id"`
	Topic     string     `json:"topic"`
	Key       string     `json:"key,omitempty"`
	Retries   int        `json:"retries"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
	DeadAt    *time.Time `json:"dead_at,omitempty"`
	LastError string     `json:"last_error,omitempty"`
}

type listAnswer struct {
	Messages    []listItem `json:"messages"`
	NextAfterID *int64     `json:"next_after_id,omitempty"`
}

// list serves GET /api/dead: a page of DEAD messages, oldest first.
func (c *Console) list(ctx context.Context, w http.ResponseWriter, r *http.Request, _ who) {
	f, more, err := parseQuery(r.URL.Query(), "after_id", "limit")
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	q := f.query()
	q.Limit, q.Scan = DefaultPage, scanWindow
	if v, ok := more["after_id"]; ok {
		if q.AfterID, err = strconv.ParseInt(v, 10, 64); err != nil || q.AfterID < 0 {
			fail(w, http.StatusBadRequest, fmt.Sprintf("after_id=%q: give an id, 0 or more (a page's next_after_id)", v))
			return
		}
	}
	if v, ok := more["limit"]; ok {
		if q.Limit, err = strconv.Atoi(v); err != nil || q.Limit < 1 || q.Limit > MaxPage {
			fail(w, http.StatusBadRequest, fmt.Sprintf("limit=%q: use 1..%d", v, MaxPage))
			return
		}
	}
	msgs, next, err := c.search.SearchDead(ctx, q)
	if err != nil {
		c.storeError(w, r, "search dead messages", err)
		return
	}
	out := listAnswer{Messages: make([]listItem, 0, len(msgs))}
	for _, m := range msgs {
		a := admin.MessageOf(m)
		out.Messages = append(out.Messages, listItem{ID: a.ID, MsgID: a.MsgID, Topic: a.Topic, Key: a.Key, Retries: a.Retries,
			CreatedAt: a.CreatedAt, DeadAt: a.DeadAt, LastError: cut(a.LastError, 300)})
	}
	if next > 0 {
		out.NextAfterID = &next
	}
	reply(w, http.StatusOK, out)
}

// countAnswer is what GET /api/dead/count serves: how many DEAD messages a
// bulk action of the filter would touch, and the bounds to send it with.
type countAnswer struct {
	Count int64 `json:"count"`
	// More: more matched than MaxAction; the action touches the first
	// MaxAction.
	More      bool       `json:"more"`
	MaxID     int64      `json:"max_id"`
	DeadUntil *time.Time `json:"dead_until,omitempty"`
}

func (c *Console) count(ctx context.Context, w http.ResponseWriter, r *http.Request, _ who) {
	f, _, err := parseQuery(r.URL.Query())
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	n, err := c.search.CountDead(ctx, f.query(), MaxAction)
	if err != nil {
		c.storeError(w, r, "count dead messages", err)
		return
	}
	out := countAnswer{Count: min(n.Count, MaxAction), More: n.Count > MaxAction, MaxID: n.MaxID}
	if !n.LastDeadAt.IsZero() {
		t := n.LastDeadAt.UTC()
		out.DeadUntil = &t
	}
	reply(w, http.StatusOK, out)
}

// historyEntry is one step of a message's error history.
type historyEntry struct {
	What string `json:"what"` // "retried" or "error"
	Text string `json:"text"`
}

type showAnswer struct {
	admin.Message
	History []historyEntry `json:"history"`
}

// show serves GET /api/message?msg_id=: one message of any status, with
// its payload, headers and error history.
func (c *Console) show(ctx context.Context, w http.ResponseWriter, r *http.Request, _ who) {
	q := r.URL.Query()
	id := q.Get("msg_id")
	if len(q) != 1 || id == "" {
		fail(w, http.StatusBadRequest, "give one msg_id: GET /api/message?msg_id=...")
		return
	}
	m, err := c.cfg.Store.GetMessage(ctx, id)
	if errors.Is(err, outbox.ErrNotFound) {
		fail(w, http.StatusNotFound, fmt.Sprintf("no message with msg_id %q", id))
		return
	}
	if err != nil {
		c.storeError(w, r, "get message", err)
		return
	}
	a := admin.MessageOf(m)
	reply(w, http.StatusOK, showAnswer{Message: a, History: history(a.LastError)})
}

// retryNote is how a retry's note ends, before the previous error; the
// admin handler and `outbox dead retry` end theirs the same way.
const retryNote = "; previous error: "

// history splits last_error into the retries that the notes record, and
// the error.
func history(lastError string) []historyEntry {
	out := []historyEntry{}
	for lastError != "" {
		note, rest, ok := strings.Cut(lastError, retryNote)
		if !ok || !strings.HasPrefix(note, "retried by ") {
			out = append(out, historyEntry{What: "error", Text: lastError})
			break
		}
		out = append(out, historyEntry{What: "retried", Text: note})
		lastError = rest
	}
	return out
}

// cause is last_error without the notes of retries before it.
func cause(lastError string) string {
	h := history(lastError)
	if len(h) == 0 || h[len(h)-1].What != "error" {
		return ""
	}
	return h[len(h)-1].Text
}

// signature is a DEAD message's failure group: its error as the relay's
// outage breaker reduces it. A msg_id, topic or key shorter than 3
// characters is left in, since taking out every "a" of a topic "a" would
// leave the text unreadable.
func signature(m outbox.Message) string {
	var own []string
	for _, v := range []string{m.MsgID, m.Topic, m.Key} {
		if len(v) >= 3 {
			own = append(own, v)
		}
	}
	return errsig.Of(redact.Text(cause(m.LastError)), own...)
}

func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

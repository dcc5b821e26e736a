package console

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/outbox-go/outbox"
)

type verb int

const (
	retry verb = iota
	drop
)

func (v verb) String() string { return [...]string{"retry", "drop"}[v] }

// Action is the body of POST /api/dead/retry and /api/dead/drop: either
// MsgIDs, or the DEAD messages that match Filter (all of them when it is
// empty) and, when Group is set, belong to that failure group. A filter or
// a group needs the bounds its count gave (GET /api/dead/count, GET
// /api/groups): MaxID, DeadUntil, and Expect, the count that was
// confirmed; the action touches only the rows within the bounds, and none
// if more than Expect are.
type Action struct {
	MsgIDs    []string   `json:"msg_ids,omitempty"`
	Filter    *Filter    `json:"filter,omitempty"`
	Group     *string    `json:"group,omitempty"`
	MaxID     int64      `json:"max_id,omitempty"`
	DeadUntil *time.Time `json:"dead_until,omitempty"`
	Expect    int64      `json:"expect,omitempty"`
}

// actionAnswer is what a retry or a drop answers.
type actionAnswer struct {
	Selected int   `json:"selected"`
	Retried  int64 `json:"retried,omitempty"`
	Dropped  int64 `json:"dropped,omitempty"`
}

func (c *Console) readAction(w http.ResponseWriter, r *http.Request) (Action, bool) {
	var a Action
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		fail(w, http.StatusUnsupportedMediaType, "send the body as Content-Type: application/json")
		return a, false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		fail(w, http.StatusBadRequest, fmt.Sprintf("the body is not an action: %v", err))
		return a, false
	}
	bulk := a.Filter != nil || a.Group != nil
	switch {
	case len(a.MsgIDs) > 0 && bulk:
		fail(w, http.StatusBadRequest, `give either "msg_ids" or "filter"/"group", not both`)
	case len(a.MsgIDs) == 0 && !bulk:
		fail(w, http.StatusBadRequest, `give "msg_ids", or a "filter" (or "group") with the bounds of its count`)
	case len(a.MsgIDs) > MaxSelection:
		fail(w, http.StatusBadRequest, fmt.Sprintf("%d msg_ids is more than %d; send them in parts", len(a.MsgIDs), MaxSelection))
	case bulk && (a.MaxID <= 0 || a.DeadUntil == nil || a.Expect <= 0):
		fail(w, http.StatusBadRequest, `a filter or a group needs "max_id", "dead_until" and "expect" from its count (GET /api/dead/count or /api/groups)`)
	case a.Filter != nil && a.Filter.check() != nil:
		fail(w, http.StatusBadRequest, "filter: "+a.Filter.check().Error())
	default:
		for _, id := range a.MsgIDs {
			if id == "" || len(id) > 64 {
				fail(w, http.StatusBadRequest, "every msg_id has 1 to 64 characters")
				return a, false
			}
		}
		return a, true
	}
	return a, false
}

// act serves a retry or a drop.
func (c *Console) act(v verb) func(http.ResponseWriter, *http.Request, who) {
	return func(w http.ResponseWriter, r *http.Request, id who) {
		if !c.cfg.Writable {
			fail(w, http.StatusForbidden, "this console is read-only: start it writable (outbox console/relay: --admin-writable)")
			return
		}
		a, ok := c.readAction(w, r)
		if !ok {
			return
		}
		// A bulk action runs a statement per MaxSelection rows: it gets
		// more time than one read.
		ctx, cancel := context.WithTimeout(r.Context(), 5*c.cfg.Timeout)
		defer cancel()
		if !c.turn(ctx) {
			fail(w, http.StatusServiceUnavailable, "busy; try again")
			return
		}
		defer func() { <-c.turns }()
		ids := a.MsgIDs
		if len(ids) == 0 {
			var err error
			if ids, err = c.resolve(ctx, a); err != nil {
				c.storeError(w, r, v.String()+" dead messages", err)
				return
			}
			if int64(len(ids)) > a.Expect {
				fail(w, http.StatusConflict, fmt.Sprintf("%d DEAD messages match now, more than the %d confirmed; count again", len(ids), a.Expect))
				return
			}
		}
		n, err := c.apply(ctx, v, ids, id)
		c.logAction(r, v, id, a, ids, n, err)
		if err != nil {
			c.storeError(w, r, v.String()+" dead messages", err)
			return
		}
		out := actionAnswer{Selected: len(ids)}
		if v == retry {
			out.Retried = n
		} else {
			out.Dropped = n
		}
		reply(w, http.StatusOK, out)
	}
}

// resolve lists the msg_ids of a bulk action's rows: those that match its
// filter and group within its bounds, at most MaxAction.
func (c *Console) resolve(ctx context.Context, a Action) ([]string, error) {
	var f Filter
	if a.Filter != nil {
		f = *a.Filter
	}
	q := f.query()
	q.MaxID = a.MaxID
	if q.DeadUntil.IsZero() || a.DeadUntil.Before(q.DeadUntil) {
		q.DeadUntil = *a.DeadUntil
	}
	var ids []string
	err := c.walk(ctx, q, MaxAction, func(m outbox.Message) {
		if a.Group == nil || signature(m) == *a.Group {
			ids = append(ids, m.MsgID)
		}
	}, func(bool) {})
	return ids, err
}

// apply retries or drops ids, MaxSelection at a time.
func (c *Console) apply(ctx context.Context, v verb, ids []string, id who) (int64, error) {
	note := fmt.Sprintf("retried by %s at %s via the console%s", printable(id.Name), time.Now().UTC().Format(time.RFC3339), retryNote)
	var done int64
	for len(ids) > 0 {
		part := ids[:min(len(ids), MaxSelection)]
		ids = ids[len(part):]
		var n int64
		var err error
		if v == retry {
			n, err = c.cfg.Store.RetryDead(ctx, outbox.DeadFilter{MsgIDs: part}, note)
		} else {
			n, err = c.cfg.Store.DropDead(ctx, outbox.DeadFilter{MsgIDs: part})
		}
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

func (c *Console) logAction(r *http.Request, v verb, id who, a Action, ids []string, n int64, err error) {
	attrs := []any{"who", id.Name, "via", id.Via, "done", n, "selected", len(ids), "msg_ids", logIDs(ids), "remote", r.RemoteAddr}
	if a.Filter != nil || a.Group != nil {
		f, _ := json.Marshal(a.Filter)
		attrs = append(attrs, "filter", string(f), "max_id", a.MaxID, "dead_until", a.DeadUntil.UTC().Format(time.RFC3339Nano), "confirmed", a.Expect)
	}
	if a.Group != nil {
		attrs = append(attrs, "group", strings.ReplaceAll(*a.Group, "\x01", "…"))
	}
	past := map[verb]string{retry: "retried", drop: "dropped"}[v]
	if err != nil {
		c.cfg.Logger.Error("outbox console: "+v.String()+" of DEAD messages failed part way", append(attrs, "error", err.Error())...)
		return
	}
	c.cfg.Logger.Info("outbox console: DEAD messages "+past, attrs...)
}

// logIDs is what the log says of the msg_ids of an action: up to 20 of
// them, then how many more.
func logIDs(ids []string) string {
	const shown = 20
	if len(ids) <= shown {
		return strings.Join(ids, ",")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:shown], ","), len(ids)-shown)
}

// printable is s without control characters, for a note in last_error.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
}

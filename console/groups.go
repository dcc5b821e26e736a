package console

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/outboxdriver"
)

// maxGroupTopics is the most topics a failure group names.
const maxGroupTopics = 5

// group is one failure group: the DEAD messages whose errors read alike.
type group struct {
	// Signature names the group in a retry or a drop.
	Signature string `json:"signature"`
	// Label is Signature for a person: "…" where a msg_id, topic or key
	// was, "#" for digits.
	Label       string    `json:"label"`
	Sample      string    `json:"sample"`
	SampleMsgID string    `json:"sample_msg_id"`
	Count       int64     `json:"count"`
	Topics      []string  `json:"topics"`
	MoreTopics  bool      `json:"more_topics,omitempty"`
	FirstDeadAt time.Time `json:"first_dead_at"`
	LastDeadAt  time.Time `json:"last_dead_at"`
}

type groupsAnswer struct {
	Groups []*group `json:"groups"`
	// Scanned is how many DEAD rows were grouped; Truncated, that there
	// were more than MaxGroupScan and only the oldest were.
	Scanned   int  `json:"scanned"`
	Truncated bool `json:"truncated"`
	// MaxID and DeadUntil bound a group's retry or drop to the rows grouped.
	MaxID     int64      `json:"max_id"`
	DeadUntil *time.Time `json:"dead_until,omitempty"`
}

// groups serves GET /api/groups: the DEAD messages that match the query's
// filter grouped by their error, the largest group first.
func (c *Console) groups(ctx context.Context, w http.ResponseWriter, r *http.Request, _ who) {
	f, _, err := parseQuery(r.URL.Query())
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	out := groupsAnswer{Groups: []*group{}}
	bySig := map[string]*group{}
	var last time.Time
	err = c.walk(ctx, f.query(), MaxGroupScan, func(m outbox.Message) {
		out.Scanned++
		out.MaxID = max(out.MaxID, m.ID)
		if m.DeadAt.After(last) {
			last = m.DeadAt
		}
		sig := signature(m)
		g := bySig[sig]
		if g == nil {
			g = &group{Signature: sig, Label: strings.ReplaceAll(sig, "\x01", "…"), Sample: cut(redact.Text(cause(m.LastError)), 500),
				SampleMsgID: m.MsgID, FirstDeadAt: m.DeadAt.UTC(), LastDeadAt: m.DeadAt.UTC()}
			bySig[sig] = g
			out.Groups = append(out.Groups, g)
		}
		g.Count++
		if m.DeadAt.Before(g.FirstDeadAt) {
			g.FirstDeadAt = m.DeadAt.UTC()
		}
		if m.DeadAt.After(g.LastDeadAt) {
			g.LastDeadAt = m.DeadAt.UTC()
		}
		addTopic(g, m.Topic)
	}, func(more bool) { out.Truncated = more })
	if err != nil {
		c.storeError(w, r, "group dead messages", err)
		return
	}
	if !last.IsZero() {
		t := last.UTC()
		out.DeadUntil = &t
	}
	sort.SliceStable(out.Groups, func(i, j int) bool { return out.Groups[i].Count > out.Groups[j].Count })
	reply(w, http.StatusOK, out)
}

func addTopic(g *group, topic string) {
	for _, t := range g.Topics {
		if t == topic {
			return
		}
	}
	if len(g.Topics) == maxGroupTopics {
		g.MoreTopics = true
		return
	}
	g.Topics = append(g.Topics, topic)
}

// walk calls fn for every DEAD message that matches q, oldest first, up to
// limit of them, a window at a time; truncated learns whether more were
// left.
func (c *Console) walk(ctx context.Context, q outboxdriver.DeadQuery, limit int, fn func(outbox.Message), truncated func(bool)) error {
	q.Limit, q.Scan = scanWindow, scanWindow
	seen := 0
	for {
		q.Limit = min(scanWindow, limit-seen)
		msgs, next, err := c.search.SearchDead(ctx, q)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			fn(m)
		}
		seen += len(msgs)
		if next == 0 {
			truncated(false)
			return nil
		}
		if seen >= limit {
			truncated(true)
			return nil
		}
		q.AfterID = next
	}
}

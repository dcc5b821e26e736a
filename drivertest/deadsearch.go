package drivertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// testDeadSearch checks the console's DEAD search (outboxdriver.DeadSearcher)
// and per-topic backlog (outboxdriver.TopicBacklogReader): every filter, the
// scan window's paging, the count's bounds.
func (s suite[TTx]) testDeadSearch(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	ds, ok := any(env.Driver).(outboxdriver.DeadSearcher)
	if !ok {
		t.Fatalf("driver %T is not an outboxdriver.DeadSearcher", env.Driver)
	}
	s.deadSearchRows(t, ctx, env)
	checkDeadSearchFilters(t, ctx, ds)
	checkDeadSearchWindow(t, ctx, ds)
	checkCountDead(t, ctx, ds)
	checkTopicBacklog(t, ctx, env.Driver)
}

// deadSearchRows writes the rows of testDeadSearch: 12 DEAD in alpha and
// beta, keyed k-even and k-odd, with two kinds of error; a SENT one in
// alpha and a NEW one in gamma.
func (s suite[TTx]) deadSearchRows(t *testing.T, ctx context.Context, env *Env[TTx]) {
	var msgs []outbox.Message
	for i := range 12 {
		topic, key := "alpha", "k-even"
		if i%3 == 0 {
			topic = "beta"
		}
		if i%2 == 1 {
			key = "k-odd"
		}
		msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("s-%02d", i), Topic: topic, Key: key, Payload: json.RawMessage(`{}`)})
	}
	msgs = append(msgs, outbox.Message{MsgID: "ok-1", Topic: "alpha", Payload: json.RawMessage(`{}`)})
	s.write(t, env, msgs...)
	// Each refusal reads differently, so that the relay does not take
	// them for an outage of the broker.
	words := strings.Fields("ash birch cedar doum elm fir gum hazel ilex juniper kapok larch")
	fail := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		var i int
		if _, err := fmt.Sscanf(m.MsgID, "s-%d", &i); err != nil {
			return nil
		}
		if m.Key == "k-odd" {
			return fmt.Errorf("consumer %s REJECTED the %s", m.MsgID, words[i])
		}
		return errors.New("timeout: " + words[i])
	})
	drain(t, newRelay(t, env.Driver, fail, outbox.RelayConfig{MaxRetries: 1}))
	if n := s.count(t, env, "status = 2"); n != 12 {
		t.Fatalf("%d DEAD rows, want 12", n)
	}
	if err := env.Exec(ctx, "INSERT INTO outbox (msg_id, topic, payload) VALUES ('p-1', 'gamma', '{}')"); err != nil {
		t.Fatal(err)
	}
}

// searchDead runs q and returns the msg_ids it found and the next page's
// AfterID; every row must be DEAD, with its error and without its payload.
func searchDead(t *testing.T, ctx context.Context, ds outboxdriver.DeadSearcher, q outboxdriver.DeadQuery) ([]string, int64) {
	t.Helper()
	got, next, err := ds.SearchDead(ctx, q)
	if err != nil {
		t.Fatalf("SearchDead(%+v): %v", q, err)
	}
	var ids []string
	for _, m := range got {
		if m.Status != outbox.StatusDead || m.LastError == "" || m.Payload != nil {
			t.Fatalf("SearchDead(%+v) gave %+v", q, m)
		}
		ids = append(ids, m.MsgID)
	}
	return ids, next
}

// expectDead checks that q finds the msg_ids of want, comma-separated.
func expectDead(t *testing.T, ctx context.Context, ds outboxdriver.DeadSearcher, q outboxdriver.DeadQuery, want string) {
	t.Helper()
	if ids, _ := searchDead(t, ctx, ds, q); strings.Join(ids, ",") != want {
		t.Errorf("SearchDead(%+v) = %v, want %s", q, ids, want)
	}
}

// checkDeadSearchFilters checks SearchDead's filters one by one and
// together.
func checkDeadSearchFilters(t *testing.T, ctx context.Context, ds outboxdriver.DeadSearcher) {
	expect := func(q outboxdriver.DeadQuery, want string) {
		t.Helper()
		expectDead(t, ctx, ds, q, want)
	}
	expect(outboxdriver.DeadQuery{}, "s-00,s-01,s-02,s-03,s-04,s-05,s-06,s-07,s-08,s-09,s-10,s-11")
	expect(outboxdriver.DeadQuery{MsgID: "s-04"}, "s-04")
	expect(outboxdriver.DeadQuery{MsgID: "ok-1"}, "")
	expect(outboxdriver.DeadQuery{Topic: "beta"}, "s-00,s-03,s-06,s-09")
	expect(outboxdriver.DeadQuery{Topic: "beta", Key: "k-odd"}, "s-03,s-09")
	expect(outboxdriver.DeadQuery{ErrorContains: "rejected"}, "s-01,s-03,s-05,s-07,s-09,s-11")
	expect(outboxdriver.DeadQuery{ErrorContains: "no such text"}, "")
	expect(outboxdriver.DeadQuery{DeadFrom: time.Now().Add(time.Hour)}, "")
	expect(outboxdriver.DeadQuery{DeadFrom: time.Now().Add(-time.Hour), DeadUntil: time.Now().Add(time.Hour), Topic: "beta", Limit: 2}, "s-00,s-03")
}

// checkDeadSearchWindow checks SearchDead's scan window: a short page, and
// the next one past the window, to the end.
func checkDeadSearchWindow(t *testing.T, ctx context.Context, ds outboxdriver.DeadSearcher) {
	search := func(q outboxdriver.DeadQuery) ([]string, int64) {
		t.Helper()
		return searchDead(t, ctx, ds, q)
	}
	// A window of 5 DEAD rows with a filter that matches 2 of them: the page
	// is short, and the next one starts past the window.
	ids, next := search(outboxdriver.DeadQuery{Key: "k-odd", Scan: 5})
	if strings.Join(ids, ",") != "s-01,s-03" || next == 0 {
		t.Fatalf("windowed search = %v, next %d", ids, next)
	}
	var all []string
	for after := int64(0); ; {
		page, n := search(outboxdriver.DeadQuery{Key: "k-odd", Scan: 5, Limit: 2, AfterID: after})
		all = append(all, page...)
		if n == 0 {
			break
		}
		after = n
	}
	if strings.Join(all, ",") != "s-01,s-03,s-05,s-07,s-09,s-11" {
		t.Fatalf("paged windowed search = %v", all)
	}
}

// checkCountDead checks CountDead's count, its bounds and its limit.
func checkCountDead(t *testing.T, ctx context.Context, ds outboxdriver.DeadSearcher) {
	c, err := ds.CountDead(ctx, outboxdriver.DeadQuery{ErrorContains: "REJECTED"}, 100)
	if err != nil || c.Count != 6 || c.MaxID == 0 || c.LastDeadAt.IsZero() {
		t.Fatalf("CountDead = %+v, %v", c, err)
	}
	// The bounds a bulk action passes on: a row made DEAD later is outside them.
	bounded, err := ds.CountDead(ctx, outboxdriver.DeadQuery{ErrorContains: "REJECTED", MaxID: c.MaxID, DeadUntil: c.LastDeadAt}, 100)
	if err != nil || bounded.Count != 6 {
		t.Fatalf("CountDead within its own bounds = %+v, %v", bounded, err)
	}
	if capped, err := ds.CountDead(ctx, outboxdriver.DeadQuery{}, 3); err != nil || capped.Count != 4 {
		t.Fatalf("CountDead with limit 3 = %+v, %v (want 4: limit+1)", capped, err)
	}
	if lower, _ := ds.CountDead(ctx, outboxdriver.DeadQuery{MaxID: c.MaxID - 1, ErrorContains: "rejected"}, 100); lower.Count != 5 {
		t.Fatalf("CountDead below MaxID = %+v", lower)
	}
	if none, _ := ds.CountDead(ctx, outboxdriver.DeadQuery{DeadUntil: time.Now().Add(-time.Hour)}, 100); none.Count != 0 || none.MaxID != 0 {
		t.Fatalf("CountDead before any DEAD row = %+v", none)
	}
}

// checkTopicBacklog checks the per-topic backlog of d: the DEAD and NEW
// rows of each topic, and the highest id.
func checkTopicBacklog(t *testing.T, ctx context.Context, d any) {
	tb, ok := d.(outboxdriver.TopicBacklogReader)
	if !ok {
		t.Fatalf("driver %T is not an outboxdriver.TopicBacklogReader", d)
	}
	topics, maxID, err := tb.TopicBacklog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(topics)
	if len(topics) != 3 || topics[0].Topic != "alpha" || topics[0].Dead != 8 || topics[0].Pending != 0 ||
		topics[1].Topic != "beta" || topics[1].Dead != 4 || topics[2].Topic != "gamma" || topics[2].Pending != 1 ||
		topics[2].OldestPendingAge < 0 || topics[2].OldestPendingAge > time.Minute || maxID < 14 {
		t.Fatalf("TopicBacklog = %s, max id %d", got, maxID)
	}
}

// testDeadSearchPlans checks that the console's statements read the DEAD
// and NEW rows through indexes, on a table of SENT history with a few DEAD
// rows among it.
func (s suite[TTx]) testDeadSearchPlans(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	dialect := env.Driver.Dialect()
	s.write(t, env, manyMsgs("cp-sent", 2000)...)
	drain(t, newRelay(t, env.Driver, &recorder{}, outbox.RelayConfig{BatchSize: 1000}))
	s.write(t, env, manyMsgs("cp-dead", 3)...)
	refuse := outbox.PublishFunc(func(context.Context, outbox.Message) error { return errors.New("refused by test") })
	drain(t, newRelay(t, env.Driver, refuse, outbox.RelayConfig{MaxRetries: 1}))
	s.write(t, env, manyMsgs("cp-new", 2)...)
	if err := analyze(ctx, dialect, env.Exec); err != nil {
		t.Fatal(err)
	}
	ex := engine(t, env.Driver)
	bad := map[string]string{"postgres": "Seq Scan on outbox ", "mysql": " outbox ALL ", "sqlite": "SCAN outbox\n"}[dialect]
	var problems []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		plan, err := ex.ExplainConsole(ctx)
		if err != nil {
			t.Fatal(err)
		}
		problems = nil
		parts := strings.Split(plan, "-- ")[1:]
		if len(parts) != 5 {
			t.Fatalf("ExplainConsole gave %d plans, want 5:\n%s", len(parts), plan)
		}
		for _, p := range parts {
			name, body, _ := strings.Cut(p, "\n")
			if strings.Contains(body, bad) || strings.Contains(body, "Parallel") {
				problems = append(problems, fmt.Sprintf("the console's %s reads the table through:\n%s", name, body))
			}
		}
		// See checkDeadPlans: PostgreSQL's DEAD index may serve only later
		// transactions for a while.
		if len(problems) == 0 || dialect != "postgres" || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
}

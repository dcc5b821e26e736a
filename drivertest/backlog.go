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

// testBacklog checks outboxdriver.BacklogReader against Stats: the NEW rows below
// PostgreSQL's low-water mark (a retry waiting out its backoff) and above it
// (rows written since), the DEAD rows, and a plan that reads no SENT
// history.
func (s suite[TTx]) testBacklog(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	br, ok := env.Driver.(outboxdriver.BacklogReader)
	if !ok {
		t.Fatalf("driver %T is no outboxdriver.BacklogReader", env.Driver)
	}
	b, err := br.Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Pending != 0 || b.OldestPendingAge != 0 || b.Dead != 0 {
		t.Fatalf("backlog of an empty table = %+v", b)
	}
	retryID := s.backlogRows(t, ctx, env)
	s.checkBacklogCounts(t, ctx, env, br, retryID)
	s.checkBacklogPlan(t, ctx, env)
}

// backlogRows writes the rows of testBacklog: 300 SENT, 2 DEAD, a retry
// waiting out an hour's backoff, below PostgreSQL's low-water mark, and 2
// NEW rows written after it. It returns the retry's id.
func (s suite[TTx]) backlogRows(t *testing.T, ctx context.Context, env *Env[TTx]) (retryID int64) {
	s.write(t, env, manyMsgs("bl-sent", 300)...)
	s.write(t, env, outbox.Message{MsgID: "bl-dead-1", Topic: "t", Payload: json.RawMessage(`1`)},
		outbox.Message{MsgID: "bl-dead-2", Topic: "t", Payload: json.RawMessage(`2`)})
	refuse := func(prefix string) outbox.Publisher {
		return outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
			if strings.HasPrefix(m.MsgID, prefix) {
				return errors.New("refused by test")
			}
			return nil
		})
	}
	drain(t, newRelay(t, env.Driver, refuse("bl-dead"), outbox.RelayConfig{MaxRetries: 1}))
	s.write(t, env, outbox.Message{MsgID: "bl-retry", Topic: "t", Payload: json.RawMessage(`3`)})
	// The retry waits an hour: NEW, not due.
	drain(t, newRelay(t, env.Driver, refuse("bl-retry"), outbox.RelayConfig{RetryBase: time.Hour, RetryMax: time.Hour}))
	// More rescans let PostgreSQL's sweep move the low-water mark past the
	// retry, which then is found through the requeued index.
	retry, err := env.Driver.GetMessage(ctx, "bl-retry")
	if err != nil {
		t.Fatal(err)
	}
	r := newRelay(t, env.Driver, &recorder{}, outbox.RelayConfig{})
	for deadline := time.Now().Add(20 * time.Second); ; {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if env.Driver.Dialect() != "postgres" {
			break
		}
		lwm, err := env.QueryInt(ctx, "SELECT lwm FROM outbox_horizon")
		if err != nil {
			t.Fatal(err)
		}
		if lwm >= retry.ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the low-water mark stays at %d, below the retry's id %d", lwm, retry.ID)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	s.write(t, env, manyMsgs("bl-new", 2)...)
	return retry.ID
}

// checkBacklogCounts checks the Backlog of backlogRows' rows against Stats.
func (s suite[TTx]) checkBacklogCounts(t *testing.T, ctx context.Context, env *Env[TTx], br outboxdriver.BacklogReader, retryID int64) {
	b, err := br.Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := env.Driver.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Pending != 3 || st.Pending != 3 {
		t.Fatalf("pending: backlog %d, stats %d, want 3 (the retry %d and two new rows)", b.Pending, st.Pending, retryID)
	}
	if b.OldestPendingAge < 20*time.Millisecond || b.OldestPendingAge > time.Minute {
		t.Fatalf("oldest pending age %s, want the retry's age (stats: %s)", b.OldestPendingAge, st.OldestPendingAge)
	}
	if !b.DeadCounted || b.Dead != 2 || st.Dead != 2 {
		t.Fatalf("dead: %d counted %v on %s, want 2 counted (stats: %d)", b.Dead, b.DeadCounted, env.Driver.Dialect(), st.Dead)
	}
}

// checkBacklogPlan checks that the Backlog's statements walk the dialect's
// indexes and never read the table through.
func (s suite[TTx]) checkBacklogPlan(t *testing.T, ctx context.Context, env *Env[TTx]) {
	ex := engine(t, env.Driver)
	plan, err := ex.ExplainBacklog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	bad := []string{"Seq Scan on outbox ", "Bitmap", "Parallel"}
	switch env.Driver.Dialect() {
	case "postgres":
		want = []string{"outbox_pkey", "outbox_requeued_idx", "-- dead\n", "outbox_dead_idx"}
	case "mysql":
		want = []string{"outbox_pending_idx", "-- dead\n"}
		bad = append(bad, " ALL ")
	default:
		want = []string{"outbox_pending_idx", "-- dead\n", "outbox_dead_idx"}
		bad = append(bad, "SCAN outbox\n")
	}
	for _, w := range want {
		if !strings.Contains(plan, w) {
			t.Errorf("the backlog does not use %s:\n%s", w, plan)
		}
	}
	for _, w := range bad {
		if strings.Contains(plan, w) {
			t.Errorf("the backlog plan has %q:\n%s", w, plan)
		}
	}
}

// testStatsPlans checks that Stats and the list of NEW messages read the
// table through indexes, never the SENT history, on a table of SENT rows
// with a few NEW and DEAD rows among it.
func (s suite[TTx]) testStatsPlans(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	dialect := env.Driver.Dialect()
	s.write(t, env, manyMsgs("sp-sent", 2000)...)
	drain(t, newRelay(t, env.Driver, &recorder{}, outbox.RelayConfig{BatchSize: 1000}))
	s.write(t, env, manyMsgs("sp-dead", 3)...)
	refuse := outbox.PublishFunc(func(context.Context, outbox.Message) error { return errors.New("refused by test") })
	drain(t, newRelay(t, env.Driver, refuse, outbox.RelayConfig{MaxRetries: 1}))
	s.write(t, env, manyMsgs("sp-new", 2)...)
	if err := analyze(ctx, dialect, env.Exec); err != nil {
		t.Fatal(err)
	}
	ex := engine(t, env.Driver)
	bad := map[string]string{"postgres": "Seq Scan on outbox ", "mysql": " outbox ALL ", "sqlite": "SCAN outbox\n"}[dialect]
	var problems []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		plan, err := ex.ExplainStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		problems = nil
		parts := strings.Split(plan, "-- ")[1:]
		if len(parts) != 4 {
			t.Fatalf("ExplainStats gave %d plans, want 4:\n%s", len(parts), plan)
		}
		for _, p := range parts {
			name, body, _ := strings.Cut(p, "\n")
			if strings.Contains(body, bad) || strings.Contains(body, "Parallel") {
				problems = append(problems, fmt.Sprintf("%s reads the table through:\n%s", name, body))
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
	st, err := env.Driver.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 2 || st.Dead != 3 || st.Sent < 2000 || st.Sent > 2005 || !st.SentEstimated {
		t.Fatalf("stats = %+v, want 2 pending, 3 dead and about 2000 sent", st)
	}
	var ids []int64
	for after := int64(0); ; {
		page, err := env.Driver.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusNew, AfterID: after, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		if page[0].Status != outbox.StatusNew || page[0].ID <= after {
			t.Fatalf("NEW page after %d: %+v", after, page[0])
		}
		after = page[0].ID
		ids = append(ids, after)
	}
	if len(ids) != 2 {
		t.Fatalf("NEW list, a row a page: ids %v, want the 2 NEW rows", ids)
	}
}

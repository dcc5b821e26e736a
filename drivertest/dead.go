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

// deadIndex is the index each dialect's DEAD statements must walk.
var deadIndex = map[string]string{"postgres": "outbox_dead_idx", "mysql": "outbox_pending_idx", "sqlite": "outbox_dead_idx"}

// deadIndexSchema is the schema version that added the DEAD index, where a
// migration added one (MySQL's pending index (status, id) finds them since
// version 1).
var deadIndexSchema = map[string]int{"postgres": 5, "sqlite": 3}

// analyze refreshes the planner's statistics of the outbox table, so that a
// plan is the one a table of this shape gets.
func analyze(ctx context.Context, dialect string, exec func(context.Context, string, ...any) error) error {
	switch dialect {
	case "postgres":
		return exec(ctx, "ANALYZE outbox")
	case "mysql":
		return exec(ctx, "ANALYZE TABLE outbox")
	}
	return exec(ctx, "ANALYZE")
}

// checkDeadPlans fails t unless every statement on the DEAD rows walks the
// dialect's DEAD index and none reads the table through (which would read
// the SENT history). On PostgreSQL an index built over HOT chains that it
// breaks (rows whose dead_at a HOT update set, as the migration's own
// backfill does) serves only transactions that begin after every older one
// has ended; other tests' transactions may hold it back a while, so the
// plans are read again until then.
func checkDeadPlans(t *testing.T, ctx context.Context, d any, dialect string) {
	t.Helper()
	ex := engine(t, d)
	var plan string
	var problems []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		if plan, err = ex.ExplainDead(ctx); err != nil {
			t.Fatal(err)
		}
		problems = deadPlanProblems(plan, dialect)
		if len(problems) == 0 || dialect != "postgres" || time.Now().After(deadline) {
			break
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// deadPlanProblems lists what is wrong with the plans ExplainDead gave.
func deadPlanProblems(plan, dialect string) (problems []string) {
	bad := []string{"Seq Scan on outbox", "Parallel"}
	switch dialect {
	case "mysql":
		// A full scan of the outbox; the JSON_TABLE of msg_ids that retry
		// and drop join is read whole, and is small.
		bad = append(bad, " outbox ALL ")
	case "sqlite":
		bad = append(bad, "SCAN outbox\n")
	}
	parts := strings.Split(plan, "-- ")[1:]
	if len(parts) != 4 {
		return []string{fmt.Sprintf("ExplainDead gave %d plans, want 4:\n%s", len(parts), plan)}
	}
	for _, p := range parts {
		name, body, _ := strings.Cut(p, "\n")
		if !strings.Contains(body, deadIndex[dialect]) {
			problems = append(problems, fmt.Sprintf("the DEAD %s does not use %s:\n%s", name, deadIndex[dialect], body))
		}
		for _, b := range bad {
			if strings.Contains(body, b) {
				problems = append(problems, fmt.Sprintf("the DEAD %s plan has %q:\n%s", name, b, body))
			}
		}
	}
	return problems
}

// testDeadRows checks the statements on the DEAD rows (dead list, the
// Backlog's count, dead retry and dead drop) against the status column, on a
// table of SENT history with a few DEAD rows among it: made DEAD by the
// relay, and set to status 2 by hand, as a sidecar might. Their plans must
// walk an index, never the SENT history.
func (s suite[TTx]) testDeadRows(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	dialect := env.Driver.Dialect()
	s.deadRows(t, ctx, env)
	s.agreeDead(t, ctx, env, 4)
	if beta, err := env.Driver.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusDead, Topic: "beta"}); err != nil || len(beta) != 2 {
		t.Fatalf("dead list of beta = %d, %v; want dr-dead-b1 and dr-hand", len(beta), err)
	}
	if pending, err := env.Driver.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusNew}); err != nil || len(pending) != 3 {
		t.Fatalf("list of NEW rows = %d, %v; want 3", len(pending), err)
	}

	if err := analyze(ctx, dialect, env.Exec); err != nil {
		t.Fatal(err)
	}
	checkDeadPlans(t, ctx, env.Driver, dialect)

	if n, err := env.Driver.RetryDead(ctx, outbox.DeadFilter{All: true, Topic: "alpha"}, "test: "); err != nil || n != 2 {
		t.Fatalf("retry alpha: %d, %v; want 2", n, err)
	}
	s.agreeDead(t, ctx, env, 2)
	if n, err := env.Driver.DropDead(ctx, outbox.DeadFilter{MsgIDs: []string{"dr-hand", "dr-back", "dr-sent-00000"}}); err != nil || n != 1 {
		t.Fatalf("drop dr-hand (and rows not DEAD): %d, %v; want 1", n, err)
	}
	s.agreeDead(t, ctx, env, 1)
	if n, err := env.Driver.DropDead(ctx, outbox.DeadFilter{All: true}); err != nil || n != 1 {
		t.Fatalf("drop all: %d, %v; want 1", n, err)
	}
	s.agreeDead(t, ctx, env, 0)
	if n := s.count(t, env, "1 = 1"); n != 2000+5+2-2 {
		t.Fatalf("%d rows left, want every row but the two dropped", n)
	}
}

// deadRows writes the rows of testDeadRows: 2000 SENT, three made DEAD by
// the relay, one set DEAD by hand, one set back from DEAD by hand, and 2
// NEW.
func (s suite[TTx]) deadRows(t *testing.T, ctx context.Context, env *Env[TTx]) {
	s.write(t, env, manyMsgs("dr-sent", 2000)...)
	drain(t, newRelay(t, env.Driver, &recorder{}, outbox.RelayConfig{BatchSize: 1000}))
	s.write(t, env, outbox.Message{MsgID: "dr-dead-a1", Topic: "alpha", Payload: json.RawMessage(`1`)},
		outbox.Message{MsgID: "dr-dead-a2", Topic: "alpha", Payload: json.RawMessage(`2`)},
		outbox.Message{MsgID: "dr-dead-b1", Topic: "beta", Payload: json.RawMessage(`3`)},
		outbox.Message{MsgID: "dr-hand", Topic: "beta", Payload: json.RawMessage(`4`)},
		outbox.Message{MsgID: "dr-back", Topic: "beta", Payload: json.RawMessage(`5`)})
	refuse := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		if strings.HasPrefix(m.MsgID, "dr-dead") || m.MsgID == "dr-back" {
			return errors.New("refused by test")
		}
		return nil
	})
	// dr-hand goes SENT here, and is set DEAD by hand below.
	drain(t, newRelay(t, env.Driver, refuse, outbox.RelayConfig{MaxRetries: 1}))
	s.write(t, env, manyMsgs("dr-new", 2)...)
	if err := env.Exec(ctx, "UPDATE outbox SET status = 2 WHERE msg_id = 'dr-hand'"); err != nil {
		t.Fatal(err)
	}
	// Set back from DEAD by hand, keeping its dead_at: no longer DEAD.
	if err := env.Exec(ctx, "UPDATE outbox SET status = 0, next_retry_at = created_at WHERE msg_id = 'dr-back'"); err != nil {
		t.Fatal(err)
	}
	if n := s.count(t, env, "msg_id = 'dr-back' AND dead_at IS NOT NULL"); n != 1 {
		t.Fatalf("the row set back by hand has no dead_at (%d)", n)
	}
}

// agreeDead checks that the status column, Stats, the Backlog and the dead
// list of testDeadRows all count want DEAD rows, and that the list has only
// those.
func (s suite[TTx]) agreeDead(t *testing.T, ctx context.Context, env *Env[TTx], want int64) {
	t.Helper()
	dialect := env.Driver.Dialect()
	if n := s.count(t, env, "status = 2"); n != want {
		t.Fatalf("%d rows of status 2, want %d", n, want)
	}
	st, err := env.Driver.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := env.Driver.(outboxdriver.BacklogReader).Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	list, err := env.Driver.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusDead, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if !b.DeadCounted || b.Dead != want || st.Dead != want || int64(len(list)) != want {
		t.Fatalf("DEAD: backlog %d (counted %v), stats %d, list %d; want %d", b.Dead, b.DeadCounted, st.Dead, len(list), want)
	}
	for _, m := range list {
		if m.Status != outbox.StatusDead || !strings.HasPrefix(m.MsgID, "dr-dead") && m.MsgID != "dr-hand" {
			t.Fatalf("dead list has %s (status %v)", m.MsgID, m.Status)
		}
		// PostgreSQL finds DEAD rows by dead_at: its trigger gives one
		// to a row set DEAD by hand.
		if dialect == "postgres" && m.DeadAt.IsZero() {
			t.Fatalf("DEAD row %s has no dead_at", m.MsgID)
		}
	}
}

// testMigrateDeadIndex upgrades tables of the version before the DEAD index,
// holding NEW, SENT and DEAD rows (one of them set DEAD by hand, without a
// dead_at), and finds the DEAD rows through the new index afterwards.
func (s suite[TTx]) testMigrateDeadIndex(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	dialect := env.Driver.Dialect()
	version, ok := deadIndexSchema[dialect]
	if !ok {
		t.Skipf("%s has found DEAD rows through its pending index since version 1", dialect)
	}
	latest, err := env.Driver.SchemaVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var downgrade []string
	switch dialect {
	case "postgres":
		downgrade = []string{"DROP TRIGGER outbox_dead_at ON outbox", "DROP FUNCTION outbox_dead_at()", "DROP INDEX outbox_dead_idx"}
	default:
		downgrade = []string{"DROP INDEX outbox_dead_idx"}
	}
	for _, q := range append(downgrade, fmt.Sprintf("DELETE FROM outbox_migrations WHERE version >= %d", version)) {
		if err := env.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if v, err := env.Driver.SchemaVersion(ctx); err != nil || v != version-1 {
		t.Fatalf("schema version after the downgrade = %d, %v; want %d", v, err, version-1)
	}

	s.write(t, env, manyMsgs("md-sent", 2000)...)
	drain(t, newRelay(t, env.Driver, &recorder{}, outbox.RelayConfig{BatchSize: 1000}))
	s.write(t, env, manyMsgs("md-dead", 3)...)
	refuse := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		if strings.HasPrefix(m.MsgID, "md-dead") {
			return errors.New("refused by test")
		}
		return nil
	})
	drain(t, newRelay(t, env.Driver, refuse, outbox.RelayConfig{MaxRetries: 1}))
	s.write(t, env, manyMsgs("md-new", 2)...)
	if err := env.Exec(ctx, "UPDATE outbox SET status = 2 WHERE msg_id = 'md-sent-00007'"); err != nil {
		t.Fatal(err)
	}

	if err := env.Driver.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := env.Driver.SchemaVersion(ctx); err != nil || v != latest {
		t.Fatalf("schema version after migrate = %d, %v; want %d", v, err, latest)
	}
	if n := s.count(t, env, "status = 0"); n != 2 {
		t.Fatalf("%d NEW rows after the migration, want 2", n)
	}
	if n := s.count(t, env, "status = 1"); n != 1999 {
		t.Fatalf("%d SENT rows after the migration, want 1999", n)
	}
	list, err := env.Driver.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusDead})
	if err != nil || len(list) != 4 {
		t.Fatalf("dead list after the migration = %d rows, %v; want 4", len(list), err)
	}
	if dialect == "postgres" {
		if n := s.count(t, env, "status = 2 AND dead_at IS NOT NULL AND next_retry_at = created_at"); n != 4 {
			t.Fatalf("%d DEAD rows have a dead_at and are out of the requeued index after the migration, want 4", n)
		}
	}
	b, err := env.Driver.(outboxdriver.BacklogReader).Backlog(ctx)
	if err != nil || !b.DeadCounted || b.Dead != 4 || b.Pending != 2 {
		t.Fatalf("backlog after the migration = %+v, %v; want 2 pending, 4 DEAD", b, err)
	}
	if err := analyze(ctx, dialect, env.Exec); err != nil {
		t.Fatal(err)
	}
	checkDeadPlans(t, ctx, env.Driver, dialect)
}

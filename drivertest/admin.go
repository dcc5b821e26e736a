package drivertest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

// testAdmin checks the admin operations of the store: Stats, the message
// list and lookup, and retry and drop of DEAD rows.
func (s suite[TTx]) testAdmin(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.adminRows(t, ctx, env)
	s.checkAdminReads(t, ctx, env)
	s.checkAdminRetryDrop(t, ctx, env)
}

// adminRows writes the admin case's rows: DEAD ones in alpha and beta, a
// SENT one in gamma, and a NEW one in alpha inserted by plain SQL.
func (s suite[TTx]) adminRows(t *testing.T, ctx context.Context, env *Env[TTx]) {
	s.write(t, env, outbox.Message{MsgID: "a-1", Topic: "alpha", Payload: json.RawMessage(`1`)},
		outbox.Message{MsgID: "a-2", Topic: "alpha", Payload: json.RawMessage(`2`)},
		outbox.Message{MsgID: "b-1", Topic: "beta", Payload: json.RawMessage(`3`)},
		outbox.Message{MsgID: "b-2", Topic: "beta", Payload: json.RawMessage(`4`)},
		outbox.Message{MsgID: "c-1", Topic: "gamma", Payload: json.RawMessage(`5`)})
	fail := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		if m.MsgID == "a-1" || strings.HasPrefix(m.MsgID, "b-") {
			return errors.New("rejected by broker")
		}
		return nil
	})
	if _, err := newRelay(t, env.Driver, fail, outbox.RelayConfig{MaxRetries: 1}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := env.Exec(ctx, "INSERT INTO outbox (msg_id, topic, payload) VALUES ('p-1', 'alpha', '{}')"); err != nil {
		t.Fatal(err)
	}
}

// checkAdminReads checks Stats, the DEAD list with its filters and paging,
// and the lookup of an unknown msg_id against the rows of adminRows.
func (s suite[TTx]) checkAdminReads(t *testing.T, ctx context.Context, env *Env[TTx]) {
	st, err := env.Driver.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Pending and Dead are exact; Sent is the id span's estimate: at least
	// the 2 SENT rows, at most every id handed out. Topics lists the topics
	// with NEW or DEAD rows: gamma has only a SENT one.
	if st.Pending != 1 || st.Dead != 3 || !st.SentEstimated || st.Sent < 2 || st.Sent > 6 || len(st.Topics) != 2 {
		t.Fatalf("stats = %+v", st)
	}
	if a := st.Topics[0]; a.Topic != "alpha" || a.Pending != 1 || a.Dead != 1 || a.OldestPendingAge < 0 || a.OldestPendingAge > time.Minute {
		t.Fatalf("alpha stats = %+v", a)
	}
	dead, err := env.Driver.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusDead})
	if err != nil || len(dead) != 3 || dead[0].MsgID != "a-1" || dead[0].LastError != "rejected by broker" || dead[0].Retries != 1 ||
		dead[0].DeadAt.Before(dead[0].CreatedAt) {
		t.Fatalf("dead list = %+v, %v", dead, err)
	}
	if beta, _ := env.Driver.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusDead, Topic: "beta"}); len(beta) != 2 {
		t.Fatalf("dead list of beta = %d", len(beta))
	}
	if page, _ := env.Driver.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusDead, AfterID: dead[0].ID, Limit: 1}); len(page) != 1 || page[0].MsgID != "b-1" {
		t.Fatalf("paged dead list = %+v", page)
	}
	if _, err := env.Driver.GetMessage(ctx, "nope"); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
}

// checkAdminRetryDrop retries and drops DEAD rows by msg_id, by topic and
// all at once, and checks that no other row moves.
func (s suite[TTx]) checkAdminRetryDrop(t *testing.T, ctx context.Context, env *Env[TTx]) {
	// Retry one by id: back to NEW with a fresh budget, and the retry recorded.
	n, err := env.Driver.RetryDead(ctx, outbox.DeadFilter{MsgIDs: []string{"a-1", "c-1"}}, "retried by test; previous error: ")
	if err != nil || n != 1 {
		t.Fatalf("retry a-1 (and SENT c-1, which must not move): %d, %v", n, err)
	}
	a1, _ := env.Driver.GetMessage(ctx, "a-1")
	if a1.Status != outbox.StatusNew || a1.Retries != 0 || !a1.DeadAt.IsZero() ||
		!strings.HasPrefix(a1.LastError, "retried by test") || !strings.Contains(a1.LastError, "rejected by broker") {
		t.Fatalf("after retry: %+v", a1)
	}
	if c1, _ := env.Driver.GetMessage(ctx, "c-1"); c1.Status != outbox.StatusSent {
		t.Fatalf("retry moved a SENT message to %v", c1.Status)
	}
	// Drop by topic with All; the NEW and SENT rows of the topic stay.
	if n, err := env.Driver.DropDead(ctx, outbox.DeadFilter{All: true, Topic: "beta"}); err != nil || n != 2 {
		t.Fatalf("drop beta: %d, %v", n, err)
	}
	if n, _ := env.Driver.DropDead(ctx, outbox.DeadFilter{MsgIDs: []string{"a-1", "p-1", "c-1"}}); n != 0 {
		t.Fatalf("drop removed %d non-DEAD rows", n)
	}
	if n, _ := env.Driver.DropDead(ctx, outbox.DeadFilter{}); n != 0 {
		t.Fatal("an empty filter dropped rows")
	}
	if got := s.count(t, env, "1 = 1"); got != 4 {
		t.Fatalf("%d rows left, want 4", got)
	}
	// Retry all.
	if err := env.Exec(ctx, "UPDATE outbox SET status = 2 WHERE msg_id = 'a-2'"); err != nil {
		t.Fatal(err)
	}
	if n, err := env.Driver.RetryDead(ctx, outbox.DeadFilter{All: true}, "all: "); err != nil || n != 1 {
		t.Fatalf("retry all: %d, %v", n, err)
	}
}

func (s suite[TTx]) testCleanup(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.sentAndPending(t, env)
	// Nothing is old enough yet.
	if n, err := env.Driver.DeleteSent(ctx, time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("cleanup of fresh rows: %d, %v", n, err)
	}
	time.Sleep(300 * time.Millisecond)
	total := int64(0)
	for {
		n, err := env.Driver.DeleteSent(ctx, 200*time.Millisecond, 7)
		if err != nil {
			t.Fatal(err)
		}
		if n > 7 {
			t.Fatalf("a batch of 7 deleted %d", n)
		}
		total += n
		if n < 7 {
			break
		}
	}
	if total != 30 {
		t.Fatalf("cleanup deleted %d, want 30", total)
	}
	if n := s.count(t, env, "1 = 1"); n != 3 {
		t.Fatalf("%d rows left, want the 3 NEW/DEAD ones", n)
	}
	if _, err := env.Driver.DeleteSent(ctx, -time.Second, 10); err == nil {
		t.Fatal("negative older-than accepted")
	}
}

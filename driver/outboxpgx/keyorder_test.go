package outboxpgx_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// TestHoldBackReadsNoSentHistory: the hold-back's check of a hot key with
// 100,000 SENT rows below the low-water mark reads a handful of buffers,
// not the key's history: the key's index is walked from the mark only, and
// the requeued and DEAD rows come from their own small indexes; nor the
// rows of other keys since the mark. With the
// mark at 0 the same check reads the whole history, which shows the test
// can tell the two apart.
func TestHoldBackReadsNoSentHistory(t *testing.T) {
	t.Parallel()
	e := newHorizonEnv(t)
	belowTheMark(t, e, `INSERT INTO outbox (msg_id, topic, msg_key, payload, status, sent_at)
SELECT 'hist-' || g, 't', 'hot', '{}', 1, now() FROM generate_series(1, 100000) AS g`)
	// Rows of other keys between the mark and the batch: a walk of the
	// primary key over that window would read them all.
	if _, err := e.pool.Exec(e.ctx, `INSERT INTO outbox (msg_id, topic, msg_key, payload)
SELECT 'other-' || g, 't', 'other-' || (g % 500), '{}' FROM generate_series(1, 20000) AS g`); err != nil {
		t.Fatal(err)
	}
	e.write("batch", 1)
	batch := []outbox.Message{{ID: e.id("batch-0"), Key: "hot"}}

	plan, err := engine(t, e.d).ExplainHoldBack(e.ctx, batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, plan, "outbox_key_idx")
	if _, err := e.pool.Exec(e.ctx, `UPDATE outbox_horizon SET lwm = 0`); err != nil {
		t.Fatal(err)
	}
	full, err := engine(t, e.d).ExplainHoldBack(e.ctx, batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := buffers(t, full); n < 1000 {
		t.Errorf("with the mark at 0 the check read only %d buffers; the test cannot tell a bounded walk:\n%s", n, full)
	}
}

// TestHoldBackFromTheKeysDoneID: with the low-water mark held far back (a
// long transaction stops the sweep), a hot key's SENT rows since the mark
// lie in the check's window; the key's done id (HoldParams.Done, the last
// id the relay saw SENT) bounds the walk instead.
func TestHoldBackFromTheKeysDoneID(t *testing.T) {
	t.Parallel()
	e := newHorizonEnv(t)
	if _, err := e.pool.Exec(e.ctx, `INSERT INTO outbox (msg_id, topic, msg_key, payload, status, sent_at)
SELECT 'since-' || g, 't', 'hot', '{}', 1, now() FROM generate_series(1, 100000) AS g`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(e.ctx, `ANALYZE outbox`); err != nil {
		t.Fatal(err)
	}
	e.write("batch", 1)
	batch := []outbox.Message{{ID: e.id("batch-0"), Key: "hot"}}
	full, err := engine(t, e.d).ExplainHoldBack(e.ctx, batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := buffers(t, full); n < 1000 {
		t.Fatalf("from the mark the check read only %d buffers; the test cannot tell a bounded walk:\n%s", n, full)
	}
	plan, err := engine(t, e.d).ExplainHoldBack(e.ctx, batch, map[string]int64{"hot": e.id("since-100000")})
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, plan, "outbox_key_idx")
}

// belowTheMark runs insert, then moves the low-water mark past its rows and
// analyzes the table.
func belowTheMark(t *testing.T, e *horizonEnv, insert string) {
	t.Helper()
	if _, err := e.pool.Exec(e.ctx, insert); err != nil {
		t.Fatal(err)
	}
	var top int64
	if err := e.pool.QueryRow(e.ctx, `SELECT max(id) FROM outbox`).Scan(&top); err != nil {
		t.Fatal(err)
	}
	e.advancePast(top, "after")
	if _, err := e.pool.Exec(e.ctx, `ANALYZE outbox`); err != nil {
		t.Fatal(err)
	}
}

// checkPlan fails t unless plan reads at most 200 buffers through index.
func checkPlan(t *testing.T, plan, index string) {
	t.Helper()
	if n := buffers(t, plan); n > 200 {
		t.Errorf("the check read %d buffers, want a handful:\n%s", n, plan)
	}
	if !strings.Contains(plan, index) {
		t.Errorf("the check does not walk %s:\n%s", index, plan)
	}
}

var buffersRe = regexp.MustCompile(`Buffers: shared (?:hit=(\d+))?\s*(?:read=(\d+))?`)

// buffers sums the shared buffers of the plan's top node.
func buffers(t *testing.T, plan string) int {
	t.Helper()
	m := buffersRe.FindStringSubmatch(plan)
	if m == nil {
		t.Fatalf("no buffers in the plan:\n%s", plan)
	}
	hit, _ := strconv.Atoi(m[1])
	read, _ := strconv.Atoi(m[2])
	return hit + read
}

// TestHoldBackReadsOnlyItsKeysRequeued: after an outage most of the backlog
// below the low-water mark is requeued (waiting out a backoff, or held
// behind its key). The check of one key reads that key's requeued rows
// through their own key index, not every requeued row of the table.
func TestHoldBackReadsOnlyItsKeysRequeued(t *testing.T) {
	t.Parallel()
	e := newHorizonEnv(t)
	// 20,000 requeued rows of 500 other keys, and one of the key checked.
	belowTheMark(t, e, `INSERT INTO outbox (msg_id, topic, msg_key, payload, next_retry_at)
SELECT 'rq-' || g, 't', CASE WHEN g = 7 THEN 'hot' ELSE 'other-' || (g % 500) END, '{}', now() + interval '1 hour'
FROM generate_series(1, 20000) AS g`)
	e.write("batch", 1)
	batch := []outbox.Message{{ID: e.id("batch-0"), Key: "hot"}}
	plan, err := engine(t, e.d).ExplainHoldBack(e.ctx, batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, plan, "outbox_requeued_key_idx")
	held, err := e.d.HoldBack(e.ctx, batch, outboxdriver.HoldParams{HeldWait: time.Second, DeadWait: time.Second})
	if err != nil || len(held) != 1 || !held[0] {
		t.Fatalf("HoldBack = %v, %v; want the batch's message held behind the requeued row of its key", held, err)
	}
}

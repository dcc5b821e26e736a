package outboxpgx_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// heldCounter is a BatchHook that counts held-back messages.
type heldCounter struct {
	mu   sync.Mutex
	held int
	sent int
}

func (h *heldCounter) OnBatch(_ context.Context, rep outbox.BatchReport) {
	h.mu.Lock()
	h.held += rep.HeldBack
	h.sent += rep.Sent
	h.mu.Unlock()
}

// A full batch ends inside a chunk of 256 ids, and Run claims the next batch
// while that one is published: the next claim must take the rest of the
// chunk over, not leave it to a later rescan, where its rows would hold back
// the later messages of their keys although nothing fails.
func TestClaimAheadTakesOverTheChunk(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool, d := migratedPool(ctx, t, newSchema(t), 0)
	w, err := outbox.NewWriter(d, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const n, keys = 5000, 300
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("ahead-%d", i), Topic: "t",
			Key: fmt.Sprintf("k%d", i%keys), Payload: json.RawMessage(`{}`)}
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	last := map[string]int64{}
	violations := 0
	// A slow publish keeps each batch in flight while Run claims the next.
	pub := outbox.BatchPublishFunc(func(_ context.Context, ms []outbox.Message) []error {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		for _, m := range ms {
			if m.ID < last[m.Key] {
				violations++
			}
			last[m.Key] = m.ID
		}
		return make([]error, len(ms))
	})
	hook := &heldCounter{}
	r, err := outbox.NewRelay(d, pub, outbox.RelayConfig{BatchSize: 500, Hooks: []any{hook},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	for {
		hook.mu.Lock()
		sent := hook.sent
		hook.mu.Unlock()
		if sent >= n || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE status = 0`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if pending != 0 || hook.sent != n {
		t.Fatalf("%d sent, %d still pending; want all %d sent", hook.sent, pending, n)
	}
	if violations != 0 {
		t.Errorf("%d messages published before an earlier one of their key", violations)
	}
	if hook.held != 0 {
		t.Errorf("%d messages held back with nothing failing; want 0", hook.held)
	}
}

// The lease of a chunk one claim took over from its predecessor: rows of
// the chunk stay hidden from other claims while either holds them, the
// predecessor's retries there still count, and whichever lets go first
// leaves the other holding the chunk.
func TestClaimTakeOverKeepsTheLease(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool, d := migratedPool(ctx, t, newSchema(t), 0)
	w, err := outbox.NewWriter(d, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]outbox.Message, 200)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("lease-%d", i), Topic: "t", Payload: json.RawMessage(`{}`)}
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatal(err)
	}
	var first int64
	if err := pool.QueryRow(ctx, `SELECT min(id) FROM outbox`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if first>>8 != (first+199)>>8 {
		t.Fatalf("ids %d..%d span two chunks; the test needs them in one", first, first+199)
	}
	lease := time.Minute
	claim := func(limit int, after int64, prev outboxdriver.Claim) outboxdriver.Claim {
		t.Helper()
		c, err := d.Claim(ctx, outboxdriver.ClaimParams{Limit: limit, AfterID: after, Lease: lease, Prev: prev})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ids := func(c outboxdriver.Claim) (lo, hi int64, n int) {
		m := c.Messages()
		if len(m) == 0 {
			return 0, 0, 0
		}
		return m[0].ID, m[len(m)-1].ID, len(m)
	}
	retries := func(id int64) (r int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT retries FROM outbox WHERE id = $1`, id).Scan(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	retryFirst := func(c outboxdriver.Claim) {
		t.Helper()
		out := make([]outbox.Outcome, len(c.Messages()))
		out[0] = outbox.Outcome{Kind: outbox.OutcomeRetry, Delay: time.Hour, Error: "refused"}
		if err := c.Finish(ctx, out); err != nil {
			t.Fatal(err)
		}
	}

	// The predecessor lets go first.
	c1 := claim(50, 0, nil)
	_, hi1, _ := ids(c1)
	// A rescan (from the first id) after c1: c1's rows, NEW while it
	// publishes, stay out of it.
	c2 := claim(50, 0, c1)
	if lo, _, n := ids(c2); n != 50 || lo != hi1+1 {
		t.Fatalf("the rescan after a claim up to %d got %d rows from %d; want 50 from %d (the rest of the chunk)", hi1, n, lo, hi1+1)
	}
	if _, _, n := ids(claim(500, 0, nil)); n != 0 {
		t.Fatalf("another claim got %d rows of a chunk two claims hold", n)
	}
	retryFirst(c1)
	if r := retries(first); r != 1 {
		t.Fatalf("the predecessor's retry in the taken-over chunk counted %d times; want 1", r)
	}
	if _, _, n := ids(claim(500, 0, nil)); n != 0 {
		t.Fatalf("another claim got %d rows while the successor still holds the chunk", n)
	}
	if err := c2.Abort(ctx); err != nil {
		t.Fatal(err)
	}

	// The successor lets go first: the chunk goes back to the predecessor.
	c3 := claim(50, 0, nil)
	lo3, hi3, _ := ids(c3)
	if lo3 != hi1+1 {
		t.Fatalf("the rescan started at %d; want %d (the first row is in its backoff, the rest of c1 is SENT)", lo3, hi1+1)
	}
	c4 := claim(50, hi3, c3)
	if lo, _, n := ids(c4); n != 50 || lo != hi3+1 {
		t.Fatalf("the claim after %d got %d rows from %d; want 50 from %d", hi3, n, lo, hi3+1)
	}
	if err := c4.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, n := ids(claim(500, 0, nil)); n != 0 {
		t.Fatalf("another claim got %d rows of the chunk the predecessor still holds", n)
	}
	retryFirst(c3)
	if r := retries(lo3); r != 1 {
		t.Fatalf("the predecessor's retry after its successor let go counted %d times; want 1", r)
	}
	c5 := claim(500, 0, nil)
	if _, _, n := ids(c5); n != 100 {
		t.Fatalf("once both let go, a claim got %d rows; want the 100 never sent", n)
	}
	if err := c5.Abort(ctx); err != nil {
		t.Fatal(err)
	}
}

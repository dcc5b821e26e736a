package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

func (h *harness) publishDuplicates(ctx context.Context, t *testing.T, pub outbox.Publisher) {
	t.Helper()
	h.mu.Lock()
	dups := append([]outbox.Message(nil), h.sent...)
	h.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i, err := range pub.Publish(pctx, dups) {
		if err != nil {
			t.Fatalf("publishing duplicate %s: %v", dups[i].MsgID, err)
		}
	}
	t.Logf("%s: published %d delivered messages again", h.b.Name, len(dups))
}

// waitEffects waits until the consumer database holds at least n effects.
// It fails when the count has not grown for two minutes: a slow subscriber
// (MQTT's takes one message at a time) may need longer than that in all.
func (h *harness) waitEffects(ctx context.Context, t *testing.T, n int, what string) {
	t.Helper()
	if err := h.awaitEffects(ctx, n, what); err != nil {
		t.Fatal(err)
	}
}

// awaitEffects is waitEffects, returning the failure instead.
func (h *harness) awaitEffects(ctx context.Context, n int, what string) error {
	last, progress := -1, time.Now()
	for {
		var got int
		if err := h.consumer.QueryRowContext(ctx, `SELECT count(DISTINCT msg_id) FROM effects`).Scan(&got); err != nil {
			return fmt.Errorf("counting effects: %w", err)
		}
		if got >= n {
			return nil
		}
		if got > last {
			last, progress = got, time.Now()
		}
		if time.Since(progress) > 2*time.Minute {
			return fmt.Errorf("%s: waiting for %s: %d of %d effects, none new for 2 minutes (%d deliveries)", h.b.Name, what, got, n, h.deliveries.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitOutboxDrained waits until every outbox row is SENT. It fails when a
// row is DEAD (it will never be sent), or when the count of rows not SENT
// has not fallen for a minute: a relay may be waiting out a message's retry
// delay.
func (h *harness) waitOutboxDrained(ctx context.Context, t *testing.T) {
	t.Helper()
	last, progress := -1, time.Now()
	for {
		pending, err := h.countOutbox(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			return
		}
		dead, err := h.countDead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if dead > 0 {
			t.Fatalf("%s: %d outbox rows are DEAD (%d not SENT in all)", h.b.Name, dead, pending)
		}
		if pending < last || last < 0 {
			last, progress = pending, time.Now()
		}
		if time.Since(progress) > time.Minute {
			t.Fatalf("%s: %d outbox rows still not SENT, none sent for a minute", h.b.Name, pending)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// check compares the consumer's effects with the producer's commits and
// returns the committed messages without an effect.
func (h *harness) check(t *testing.T, committed []string) (lost []string) {
	t.Helper()
	ctx := context.Background()
	rows, err := h.consumer.QueryContext(ctx, `SELECT msg_id, account, amount FROM effects`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	effects := map[string]int{}
	var wrong []string
	h.mu.Lock()
	for rows.Next() {
		var id string
		var tr transfer
		if err := rows.Scan(&id, &tr.Account, &tr.Amount); err != nil {
			h.mu.Unlock()
			t.Fatal(err)
		}
		effects[id]++
		if want, ok := h.expected[id]; ok && tr != want {
			wrong = append(wrong, fmt.Sprintf("%s: %+v, want %+v", id, tr, want))
		}
	}
	h.mu.Unlock()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var doubled, phantom []string
	for _, id := range committed {
		switch n := effects[id]; {
		case n == 0:
			lost = append(lost, id)
		case n > 1:
			doubled = append(doubled, fmt.Sprintf("%s×%d", id, n))
		}
	}
	for id := range effects {
		if h.rolledBack[id] {
			phantom = append(phantom, id)
		} else if !h.committed[id] {
			phantom = append(phantom, id+" (never written)")
		}
	}
	rows2, err := h.countOutbox(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d committed, %d rolled back, %d outbox rows; %d deliveries, %d duplicates discarded by the inbox; injected failures: %d handler, %d change, %d commit",
		h.b.Name, len(committed), len(h.rolledBack), rows2, h.deliveries.Load(), h.discarded.Load(), h.failed.Load(), h.fnFailed.Load(), h.commitFailed.Load())
	t.Logf("%s: lost %d, duplicate effects %d, effects of rolled-back transactions %d", h.b.Name, len(lost), len(doubled), len(phantom))
	if len(lost)+len(doubled)+len(phantom) > 0 {
		t.Errorf("%s: lost %v; applied more than once %v; effects without a commit %v", h.b.Name, lost, doubled, phantom)
	}
	if len(wrong) > 0 {
		t.Errorf("%s: %d effects differ from the transfer their transaction wrote: %v", h.b.Name, len(wrong), wrong)
	}
	// Every kind of injected failure must have happened, or its check was
	// not made.
	for _, f := range []struct {
		what string
		n    int64
	}{{"handler", h.failed.Load()}, {"change", h.fnFailed.Load()}, {"commit", h.commitFailed.Load()}} {
		if f.n == 0 {
			t.Errorf("%s: no injected %s failure happened", h.b.Name, f.what)
		}
	}
	if int64(rows2)+h.cleaned != int64(len(committed)) {
		t.Errorf("%s: %d outbox rows (and %d deleted by cleanup) for %d committed transactions", h.b.Name, rows2, h.cleaned, len(committed))
	}
	// A broker that deduplicates by msg_id (JetStream, within its window)
	// drops the re-published copies before the subscriber sees them; its
	// test shortens the window so that the inbox is exercised all the same.
	if h.discarded.Load() == 0 {
		t.Errorf("%s: the inbox discarded no duplicate, so the duplicate deliveries did not happen", h.b.Name)
	}
	return lost
}

// checkStillNew fails the test unless every row of ids is NEW.
func (h *harness) checkStillNew(ctx context.Context, t *testing.T, ids []string) {
	t.Helper()
	var notNew int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE msg_id = ANY($1) AND status <> 0`, ids).Scan(&notNew); err != nil {
		t.Fatal(err)
	}
	if notNew > 0 {
		t.Fatalf("%s: %d of the %d rows of the batch relay 1 died on (its publisher failed them) are no longer NEW", h.b.Name, notNew, len(ids))
	}
}

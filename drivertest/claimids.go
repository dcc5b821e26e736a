package drivertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// ClaimIDs checks a store's claim by id (outboxdriver.IDClaimer), as the CDC
// relay uses it: only the listed rows that are NEW and held by no other
// claim are taken, in id order; a SENT row and a row another claim holds
// are left out; a Finish marks as Claim's does.
func ClaimIDs[TTx any](t *testing.T, env *Env[TTx]) {
	t.Helper()
	ctx := context.Background()
	ic, ok := env.Driver.(outboxdriver.IDClaimer)
	if !ok {
		t.Fatalf("%T does not implement outboxdriver.IDClaimer", env.Driver)
	}
	w, err := outbox.NewWriter(env.Driver, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := range 4 {
		if err := env.Driver.RunInTx(ctx, func(ctx context.Context, tx TTx) error {
			return w.Write(ctx, tx, outbox.Message{MsgID: fmt.Sprintf("cid-%d", i), Topic: "t", Payload: []byte(`{}`)})
		}); err != nil {
			t.Fatal(err)
		}
		id, err := env.QueryInt(ctx, "SELECT id FROM outbox WHERE msg_id = ?", fmt.Sprintf("cid-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	c, err := ic.ClaimIDs(ctx, []int64{ids[2], ids[0]}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := c.Messages()
	if len(got) != 2 || got[0].ID != ids[0] || got[1].ID != ids[2] || got[0].MsgID != "cid-0" {
		t.Fatalf("ClaimIDs(3rd, 1st) = %+v; want the 1st and the 3rd, in id order", got)
	}
	again, err := ic.ClaimIDs(ctx, []int64{ids[0], ids[2]}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(again.Messages()); n != 0 {
		t.Fatalf("a second claim of claimed ids took %d rows", n)
	}
	if err := again.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Finish(ctx, []outbox.Outcome{{Kind: outbox.OutcomeSent}, {Kind: outbox.OutcomeSent}}); err != nil {
		t.Fatal(err)
	}
	sent, err := env.QueryInt(ctx, "SELECT count(*) FROM outbox WHERE status = 1 AND msg_id IN ('cid-0', 'cid-2')")
	if err != nil || sent != 2 {
		t.Fatalf("%d of 2 marked SENT (%v)", sent, err)
	}
	c2, err := ic.ClaimIDs(ctx, ids, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got = c2.Messages()
	if len(got) != 2 || got[0].ID != ids[1] || got[1].ID != ids[3] {
		t.Fatalf("ClaimIDs(all) after two SENT = %+v; want the 2nd and the 4th", got)
	}
	if err := c2.Abort(ctx); err != nil {
		t.Fatal(err)
	}
}

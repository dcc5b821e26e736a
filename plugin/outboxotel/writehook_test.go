package outboxotel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
	"github.com/outbox-go/outbox/plugin/outboxotel"
)

// memDriver is an outboxdriver.Driver that keeps the rows the Writer inserts and
// hands them all to the relay's next claim.
type memDriver struct {
	outboxdriver.Store
	mu       sync.Mutex
	rows     []outbox.Message
	outcomes []outbox.Outcome
}

func (d *memDriver) Dialect() string       { return "postgres" }
func (d *memDriver) Tables() outbox.Tables { return outbox.Tables{}.WithDefaults() }

func (d *memDriver) InsertTx(_ context.Context, _ fakeTx, msgs []outbox.Message) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range msgs {
		m.ID = int64(len(d.rows) + 1)
		d.rows = append(d.rows, m)
	}
	return nil
}

func (d *memDriver) MarkConsumedTx(context.Context, fakeTx, string, string) (bool, error) {
	return false, fmt.Errorf("not used")
}

func (d *memDriver) RunInTx(context.Context, func(context.Context, fakeTx) error) error {
	return fmt.Errorf("not used")
}

func (d *memDriver) Claim(context.Context, outboxdriver.ClaimParams) (outboxdriver.Claim, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := &memClaim{d: d, msgs: d.rows}
	d.rows = nil
	return c, nil
}

type memClaim struct {
	d    *memDriver
	msgs []outbox.Message
}

func (c *memClaim) Messages() []outbox.Message  { return c.msgs }
func (c *memClaim) Abort(context.Context) error { return nil }
func (c *memClaim) Finish(_ context.Context, outcomes []outbox.Outcome) error {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	c.d.outcomes = append(c.d.outcomes, outcomes...)
	return nil
}

// One Hook in the writer's and the relay's hooks: the writer's messages
// carry the writer's trace context with no Inject by hand, and the relay's
// batch span links to it.
func TestHookFromWriterToBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hooks := []outbox.Hook{outboxotel.NewHook(b.opts...)}
	drv := &memDriver{}
	w, err := outbox.NewWriter[fakeTx](drv, outbox.WriterConfig{Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(drv, outbox.Discard, outbox.RelayConfig{Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}

	ctx, checkout := b.tp.Tracer("shop").Start(context.Background(), "checkout")
	custom := "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"
	shared := map[string]string{"tenant": "eu1"}
	msgs := []outbox.Message{
		{MsgID: "a", Topic: "order.paid", Payload: []byte(`{}`), Headers: shared},
		{MsgID: "b", Topic: "order.paid", Payload: []byte(`{}`)},
		{MsgID: "c", Topic: "order.paid", Payload: []byte(`{}`), Headers: map[string]string{"traceparent": custom}},
	}
	if err := w.Write(ctx, fakeTx{}, msgs...); err != nil {
		t.Fatal(err)
	}
	checkout.End()
	if len(shared) != 1 || msgs[1].Headers != nil || msgs[2].Headers["traceparent"] != custom {
		t.Errorf("the hook changed the caller's messages: %v, %v, %v", shared, msgs[1].Headers, msgs[2].Headers)
	}
	want := fmt.Sprintf("00-%s-%s-01", checkout.SpanContext().TraceID(), checkout.SpanContext().SpanID())
	drv.mu.Lock()
	stored := append([]outbox.Message(nil), drv.rows...)
	drv.mu.Unlock()
	if len(stored) != 3 || stored[0].Headers["traceparent"] != want || stored[0].Headers["tenant"] != "eu1" ||
		stored[1].Headers["traceparent"] != want || stored[2].Headers["traceparent"] != custom {
		t.Fatalf("stored %+v, want traceparent %s on a and b beside their headers, c's own on c", stored, want)
	}

	rep, err := relay.RunOnce(context.Background())
	if err != nil || rep.Sent != 3 {
		t.Fatalf("RunOnce: %+v, %v; want 3 sent", rep, err)
	}
	s := b.span(t, "send order.paid")
	wantLinks := []trace.SpanID{checkout.SpanContext().SpanID(), checkout.SpanContext().SpanID(), {1, 2, 3, 4, 5, 6, 7, 8}}
	if len(s.Links()) != len(wantLinks) {
		t.Fatalf("batch span has %d links, want %d", len(s.Links()), len(wantLinks))
	}
	for i, l := range s.Links() {
		if l.SpanContext.SpanID() != wantLinks[i] {
			t.Errorf("link %d to span %v, want %v", i, l.SpanContext.SpanID(), wantLinks[i])
		}
	}
	if s.Links()[0].SpanContext.TraceID() != checkout.SpanContext().TraceID() {
		t.Errorf("link 0 in trace %v, want the writer's %v", s.Links()[0].SpanContext.TraceID(), checkout.SpanContext().TraceID())
	}
}

// TestHookOnWriteNoTrace is not parallel: AllocsPerRun refuses to be.
func TestHookOnWriteNoTrace(t *testing.T) {
	b := setup(t)
	h := outboxotel.NewHook(b.opts...)
	msgs := []outbox.Message{{MsgID: "a", Topic: "t"}}
	allocs := testing.AllocsPerRun(100, func() {
		if err := h.OnWrite(context.Background(), msgs); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 || msgs[0].Headers != nil {
		t.Errorf("OnWrite without a trace: %v allocations, headers %v; want none", allocs, msgs[0].Headers)
	}
}

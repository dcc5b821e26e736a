package tracing

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxnats"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/plugin/outboxotel"
)

// TestEndToEndPostgresNATS follows three messages from business
// transactions on PostgreSQL through a real Relay and NATS JetStream to a
// subscriber: one written with Inject inside the producer's span, one with
// the Writer's create span, and one written with its COMMIT
// (WriteOnCommit) by a Writer whose hooks hold the relay's Hook, which
// gives it its producer's context with no Inject. The consumer's process span must be the child of the
// context the message carried, in the producer's trace, and the relay's
// batch span must link to it.
func TestEndToEndPostgresNATS(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := setup(t)
	pool := pgSchema(ctx, t)
	brokerURL := natsStreams(t)

	drv, err := outboxpgx.New(pool, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL); INSERT INTO orders VALUES (42, 'new'), (43, 'new')`); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	hooks := []outbox.Hook{outboxotel.NewHook(append(b.opts, outboxotel.WithSystem("nats"))...)}
	hw, err := outbox.NewWriter(drv, outbox.WriterConfig{Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	ow := outboxotel.NewWriter(w, append(b.opts, outboxotel.WithSystem("nats"))...)

	// The subscriber first, so that its group exists before anything is published.
	sub, err := outboxnats.NewSubscriber(ctx, outboxnats.SubscriberConfig{URL: brokerURL, Group: "billing", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Close() }()
	pub, err := outboxnats.NewPublisher(ctx, outboxnats.PublisherConfig{URL: brokerURL})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Close() }()

	// A trace state from upstream, with a space in a value, which NATS
	// headers carry only percent-encoded.
	ts, err := trace.ParseTraceState("vendor=a b,rojo=00f067aa0ba902b7")
	if err != nil {
		t.Fatal(err)
	}
	upstream := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab, 1}, SpanID: trace.SpanID{0xcd, 2},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	pctx, producer := b.tp.Tracer("shop").Start(trace.ContextWithRemoteSpanContext(ctx, upstream), "checkout")
	injected := outbox.Message{MsgID: "order-42:OrderPaid", Topic: "order.paid", Key: "order-42",
		Payload: []byte(`{"order":42}`), Headers: map[string]string{"tenant": "eu1"}}
	outboxotel.Inject(pctx, &injected, b.opts...)
	err = pgx.BeginFunc(pctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(pctx, `UPDATE orders SET status = 'paid' WHERE id = 42`); err != nil {
			return err
		}
		if err := w.Write(pctx, tx, injected); err != nil {
			return err
		}
		if _, err := tx.Exec(pctx, `UPDATE orders SET status = 'paid' WHERE id = 43`); err != nil {
			return err
		}
		return ow.Write(pctx, tx, outbox.Message{MsgID: "order-43:OrderPaid", Topic: "order.paid", Payload: []byte(`{"order":43}`)})
	})
	producer.End()
	if err != nil {
		t.Fatal(err)
	}
	hctx, onCommit := b.tp.Tracer("shop").Start(ctx, "checkout on commit")
	err = drv.WriteOnCommit(hctx, hw, func(ctx context.Context, tx pgx.Tx) ([]outbox.Message, error) {
		_, err := tx.Exec(ctx, `INSERT INTO orders VALUES (44, 'paid')`)
		return []outbox.Message{{MsgID: "order-44:OrderPaid", Topic: "order.paid", Payload: []byte(`{"order":44}`)}}, err
	})
	onCommit.End()
	if err != nil {
		t.Fatal(err)
	}
	create := b.span(t, "create order.paid")
	want := map[string]trace.SpanContext{
		"order-42:OrderPaid": producer.SpanContext(),
		"order-43:OrderPaid": create.SpanContext(),
		"order-44:OrderPaid": onCommit.SpanContext(),
	}

	relay, err := outbox.NewRelay(drv, pub, outbox.RelayConfig{Interval: 20 * time.Millisecond, Hooks: hooks, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(rctx) }()
	defer stopRelay()

	var mu sync.Mutex
	received := map[string]outbox.Message{}
	inside := map[string]trace.SpanContext{}
	sctx, stopSub := context.WithCancel(ctx)
	err = sub.Run(sctx, outboxotel.Handler(func(ctx context.Context, m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		received[m.MsgID] = m
		inside[m.MsgID] = trace.SpanContextFromContext(ctx)
		if len(received) == len(want) {
			stopSub()
		}
		return nil
	}, append(b.opts, outboxotel.WithSystem("nats"), outboxotel.WithConsumerGroup("billing"))...))
	stopSub()
	if err != nil {
		t.Fatalf("sub.Run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("timed out with %d of %d messages received", len(received), len(want))
	}

	// Run finishes and marks the batch in flight, and calls the hooks, before it returns.
	stopRelay()
	if err := <-relayDone; err != nil {
		t.Fatalf("relay.Run: %v", err)
	}

	// The headers came back as they left.
	if got := received["order-42:OrderPaid"].Headers; got["traceparent"] != injected.Headers["traceparent"] ||
		got["tracestate"] != ts.String() || got["tenant"] != "eu1" {
		t.Errorf("received headers %v, want those written %v", got, injected.Headers)
	}

	// The relay's batch spans link to every producer context.
	linked := map[trace.SpanID]string{}
	for _, s := range b.rec.Ended() {
		if s.Name() != "send order.paid" {
			continue
		}
		if s.SpanKind() != trace.SpanKindClient || attr(s, "messaging.system").AsString() != "nats" {
			t.Errorf("batch span: kind %v, system %q", s.SpanKind(), attr(s, "messaging.system").AsString())
		}
		for _, l := range s.Links() {
			linked[l.SpanContext.SpanID()] = l.Attributes[0].Value.AsString()
		}
	}

	for id, sc := range want {
		if linked[sc.SpanID()] != id {
			t.Errorf("%s: no relay batch span links to its producer span %v (links: %v)", id, sc.SpanID(), linked)
		}
		got := inside[id]
		proc := b.byID(got.SpanID())
		if proc == nil || proc.Name() != "process order.paid" || proc.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("%s: the handler did not run in a process span", id)
			continue
		}
		ps := proc.Parent()
		if len(proc.Links()) != 1 || proc.Links()[0].SpanContext.SpanID() != sc.SpanID() {
			t.Errorf("%s: process span links %v, want one to %v", id, proc.Links(), sc.SpanID())
		}
		if got.TraceID() != sc.TraceID() || ps.SpanID() != sc.SpanID() {
			t.Errorf("%s: process span in trace %v with parent %v, want trace %v, parent %v", id, got.TraceID(), ps.SpanID(), sc.TraceID(), sc.SpanID())
		}
		if id == "order-42:OrderPaid" && (got.TraceID() != upstream.TraceID() || got.TraceState().String() != ts.String()) {
			t.Errorf("%s: process span trace %v state %q, want the upstream's %v %q", id, got.TraceID(), got.TraceState(), upstream.TraceID(), ts)
		}
	}
}

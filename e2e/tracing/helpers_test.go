// Package tracing tests plugin/outboxotel end to end: trace context written
// with a message on PostgreSQL, carried through a real relay and a real broker
// (NATS JetStream, Redis Streams) to the consumer's span. It lives in the e2e
// module so that the plugin's own module needs no database or broker client.
package tracing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/plugin/outboxotel"
)

// bundle is one test's tracer provider and the spans it recorded.
type bundle struct {
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
	// opts aim this package at tp, with W3C Trace Context, so that no test
	// depends on (or changes) the global provider and propagator.
	opts []outboxotel.Opt
}

func setup(t *testing.T) *bundle {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &bundle{rec: rec, tp: tp, opts: []outboxotel.Opt{
		outboxotel.WithTracerProvider(tp),
		outboxotel.WithPropagator(propagation.TraceContext{}),
	}}
}

// span returns the one ended span named name.
func (b *bundle) span(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range b.rec.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d ended spans named %q, want 1 (all: %s)", len(found), name, names(b.rec.Ended()))
	}
	return found[0]
}

func names(spans []sdktrace.ReadOnlySpan) string {
	var ns []string
	for _, s := range spans {
		ns = append(ns, s.Name())
	}
	return strings.Join(ns, ", ")
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// tracedMessage returns a message that carries the context of a producer
// span, with a trace state whose value has a space (which header-based
// transports must percent-encode), and that span's context.
func tracedMessage(t *testing.T, b *bundle, topic string) (outbox.Message, trace.SpanContext) {
	t.Helper()
	ts, err := trace.ParseTraceState("vendor=a b,rojo=00f067aa0ba902b7")
	if err != nil {
		t.Fatal(err)
	}
	upstream := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab, 2}, SpanID: trace.SpanID{0xcd, 3},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	ctx, span := b.tp.Tracer("shop").Start(trace.ContextWithRemoteSpanContext(context.Background(), upstream), "checkout")
	span.End()
	m := outbox.Message{MsgID: "order-7:OrderPaid", Topic: topic, Payload: []byte(`{"order":7}`),
		CreatedAt: time.Now().UTC(), Headers: map[string]string{"tenant": "eu1"}}
	outboxotel.Inject(ctx, &m, b.opts...)
	return m, span.SpanContext()
}

// checkReceived checks that got, as the consumer received it, carries the
// trace headers of sent, and that the process span continued producer.
func checkReceived(t *testing.T, b *bundle, sent, got outbox.Message, inside, producer trace.SpanContext) {
	t.Helper()
	for _, h := range []string{outboxotel.TraceParentHeader, outboxotel.TraceStateHeader, "tenant"} {
		if got.Headers[h] != sent.Headers[h] {
			t.Errorf("header %s = %q on arrival, want %q", h, got.Headers[h], sent.Headers[h])
		}
	}
	proc := b.byID(inside.SpanID())
	if proc == nil {
		t.Fatalf("the handler did not run in a recorded span")
	}
	if proc.Parent().SpanID() != producer.SpanID() || inside.TraceID() != producer.TraceID() ||
		inside.TraceState().String() != producer.TraceState().String() {
		t.Errorf("process span: trace %v parent %v state %q, want trace %v parent %v state %q",
			inside.TraceID(), proc.Parent().SpanID(), inside.TraceState(), producer.TraceID(), producer.SpanID(), producer.TraceState())
	}
}

// byID returns the ended span with span id id, nil when there is none.
func (b *bundle) byID(id trace.SpanID) sdktrace.ReadOnlySpan {
	for _, s := range b.rec.Ended() {
		if s.SpanContext().SpanID() == id {
			return s
		}
	}
	return nil
}

func postgresDSN() string {
	if d := os.Getenv("OUTBOX_PG_DSN"); d != "" {
		return d
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func natsURL() string {
	if u := os.Getenv("OUTBOX_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func uniqueID(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// pgSchema makes a schema of the test's own on PostgreSQL and returns a
// pool whose search_path is that schema. It fails the test when PostgreSQL
// is not there.
func pgSchema(ctx context.Context, t *testing.T) *pgxpool.Pool {
	t.Helper()
	admin, err := pgxpool.New(ctx, postgresDSN())
	if err == nil {
		err = admin.Ping(ctx)
	}
	if err != nil {
		t.Fatalf("PostgreSQL at %s is required (set OUTBOX_PG_DSN): %v", postgresDSN(), err)
	}
	t.Cleanup(admin.Close)
	schema := "otel_" + uniqueID(t)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	cfg, err := pgxpool.ParseConfig(postgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// natsStreams returns a broker URL with a stream, subjects and dead-letter
// stream of the test's own, deleted when it ends. It fails the test when
// the NATS server is not there.
func natsStreams(t *testing.T) string {
	t.Helper()
	nc, err := nats.Connect(natsURL(), nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatalf("the NATS server with JetStream at %s is required (set OUTBOX_NATS_URL): %v", natsURL(), err)
	}
	nc.Close()
	id := uniqueID(t)
	t.Cleanup(func() {
		nc, err := nats.Connect(natsURL(), nats.Timeout(time.Second))
		if err != nil {
			return
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, "OTEL_"+id)
		_ = js.DeleteStream(ctx, "OTEL_"+id+"_DEAD")
	})
	return fmt.Sprintf("%s?subject=otel%s.{topic}&stream=OTEL_%s&dead=otel%sdead.{group}&dead_stream=OTEL_%s_DEAD&storage=memory",
		natsURL(), id, id, id, id)
}

func redisURL() string {
	if u := os.Getenv("OUTBOX_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

package outboxotel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/plugin/outboxotel"
)

// benchReport is a batch of n sent messages, each with a producer's
// traceparent, as the relay hands it to its hooks.
func benchReport(n int) outbox.BatchReport {
	rep := outbox.BatchReport{Results: make([]outbox.MessageResult, n), Sent: n,
		Duration: 4 * time.Millisecond, ClaimDuration: time.Millisecond,
		PublishDuration: 2 * time.Millisecond, MarkDuration: time.Millisecond}
	for i := range rep.Results {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{byte(i >> 8), byte(i), 1},
			SpanID: trace.SpanID{byte(i >> 8), byte(i), 2}, TraceFlags: trace.FlagsSampled})
		m := outbox.Message{MsgID: fmt.Sprintf("order-%d:OrderPaid", i), Topic: "order.paid", Payload: []byte(`{}`)}
		outboxotel.Inject(trace.ContextWithSpanContext(context.Background(), sc), &m, outboxotel.WithPropagator(propagation.TraceContext{}))
		rep.Results[i] = outbox.MessageResult{Message: m, Outcome: outbox.Outcome{Kind: outbox.OutcomeSent}}
	}
	return rep
}

// BenchmarkOnBatch measures the hook on a batch of 500: with an SDK
// provider that samples every span and exports to nowhere, with one that
// samples none, and with tracing off (the no-op provider).
func BenchmarkOnBatch(b *testing.B) {
	rep := benchReport(500)
	prop := outboxotel.WithPropagator(propagation.TraceContext{})
	exp := tracetest.NewNoopExporter()
	for _, c := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"sdk-sampled", sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))},
		{"sdk-not-sampled", sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.NeverSample()))},
		{"off", noop.NewTracerProvider()},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := outboxotel.NewHook(outboxotel.WithTracerProvider(c.tp), prop)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				h.OnBatch(ctx, rep)
			}
		})
	}
}

// BenchmarkInject measures Inject with a span in ctx, and without one (what
// every Write pays with tracing off).
func BenchmarkInject(b *testing.B) {
	prop := outboxotel.WithPropagator(propagation.TraceContext{})
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{
		{"span", trace.ContextWithSpanContext(context.Background(), sc)},
		{"off", context.Background()},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m := outbox.Message{MsgID: "m", Topic: "t", Headers: map[string]string{"tenant": "eu1"}}
				outboxotel.Inject(c.ctx, &m, prop)
			}
		})
	}
}

package outboxotel

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
)

// The header names of W3C Trace Context, as the CloudEvents distributed
// tracing extension names its attributes. With the default propagator a
// message carries these two headers.
const (
	// TraceParentHeader holds the producer's trace id, span id and flags,
	// e.g. "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".
	TraceParentHeader = "traceparent"
	// TraceStateHeader holds vendor-specific trace state, when there is any.
	TraceStateHeader = "tracestate"
)

// Inject writes the trace context of ctx into m.Headers, with the
// propagator of WithPropagator (see there for the default), so that the
// consumers of m can continue the trace. Call it before Writer.Write, or
// put a Hook in outbox.WriterConfig.Hooks, which does it for every write.
//
// Inject gives m a headers map of its own (a copy of the one it had, plus
// the trace headers), so a map shared by several messages is never
// changed. It does nothing, and allocates nothing, when ctx carries neither
// a valid span context nor baggage: with tracing off, Write costs what it
// did. A header name the propagator uses is turned into one the Writer
// accepts (see WithPropagator); a name that cannot be (one of the
// attributes the relay sets itself, such as "id") is left out.
func Inject(ctx context.Context, m *outbox.Message, opts ...Opt) {
	if !trace.SpanContextFromContext(ctx).IsValid() && baggage.FromContext(ctx).Len() == 0 {
		return
	}
	c := newConfig(opts)
	inject(ctx, c.propagator(), m)
}

func inject(ctx context.Context, p propagation.TextMapPropagator, m *outbox.Message) {
	h := make(map[string]string, len(m.Headers)+2)
	maps.Copy(h, m.Headers)
	p.Inject(ctx, headerCarrier(h))
	m.Headers = h
}

// Extract returns ctx with the trace context (and baggage) that m's headers
// carry, read with the propagator of WithPropagator. When m carries none,
// ctx comes back as it was. Handler calls it; a consumer that does not use
// an outbox.Handler can call it itself.
func Extract(ctx context.Context, m outbox.Message, opts ...Opt) context.Context {
	if len(m.Headers) == 0 {
		return ctx
	}
	c := newConfig(opts)
	return c.propagator().Extract(ctx, headerCarrier(m.Headers))
}

// SpanContext returns the span context that m's headers carry, read with
// the propagator of WithPropagator; it is not valid when m carries none.
// It is the context a Hook links its batch span to.
func SpanContext(m outbox.Message, opts ...Opt) trace.SpanContext {
	c := newConfig(opts)
	return spanContext(c.propagator(), m)
}

func spanContext(p propagation.TextMapPropagator, m outbox.Message) trace.SpanContext {
	if len(m.Headers) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(p.Extract(context.Background(), headerCarrier(m.Headers)))
}

// headerCarrier is a message's headers as a propagation.TextMapCarrier. Keys
// are turned into CloudEvents attribute names, the only header names the
// Writer accepts and every transport carries unchanged.
type headerCarrier map[string]string

var _ propagation.TextMapCarrier = headerCarrier(nil)

// Get returns the value of key, "" when there is none.
func (h headerCarrier) Get(key string) string {
	if v, ok := h[key]; ok {
		return v
	}
	if n := headerName(key); n != key {
		return h[n]
	}
	return ""
}

// Set stores value under key's header name, unless key has none.
func (h headerCarrier) Set(key, value string) {
	if n := headerName(key); n != "" {
		h[n] = value
	}
}

// Keys returns the header names.
func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// headerName returns key as a header name the Writer accepts: key itself
// when it is one already (traceparent, tracestate, baggage), else what
// cloudevents.ExtensionName makes of it; "" when nothing acceptable is left
// (a reserved attribute name, or more than outbox.MaxHeaderName
// characters).
func headerName(key string) string {
	n := key
	for i := 0; i < len(key); i++ {
		if c := key[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			n = cloudevents.ExtensionName(key)
			break
		}
	}
	if n == "" || len(n) > outbox.MaxHeaderName || cloudevents.IsReserved(n) {
		return ""
	}
	return n
}

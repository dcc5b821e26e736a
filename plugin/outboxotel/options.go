package outboxotel

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer this package uses.
const ScopeName = "github.com/outbox-go/outbox/plugin/outboxotel"

// DefaultSystem is the messaging.system attribute when WithSystem is not
// given: the relay and the handler do not know which broker carries the
// messages.
const DefaultSystem = "outbox"

// DefaultMaxLinks is how many producers' span contexts a Hook links to one
// batch span when WithMaxLinks is not given. It is the OpenTelemetry SDK's
// default span link limit (SpanLimits.LinkCountLimit), beyond which the SDK
// would drop links anyway, after this package had paid for extracting them.
const DefaultMaxLinks = 128

// maxErrorEvents caps the error events a Hook records on one batch span: a
// broker that refuses a whole batch of 10,000 would otherwise add 10,000
// events. The span's status and attributes still count every failure.
const maxErrorEvents = 16

// Opt configures Inject, Extract, NewWriter, NewHook and Handler. Options a
// function has no use for are ignored.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	tp       trace.TracerProvider
	prop     propagation.TextMapPropagator
	system   string
	maxLinks int
	group    string
	linkOnly bool
}

func newConfig(opts []Opt) config {
	c := config{system: DefaultSystem, maxLinks: DefaultMaxLinks}
	for _, o := range opts {
		o.apply(&c)
	}
	return c
}

// tracer returns the configured provider's tracer, or the global one's.
func (c *config) tracer() trace.Tracer {
	tp := c.tp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))
}

// propagator returns the configured propagator; else the global one when
// something was set there; else W3C Trace Context. The global propagator is
// looked up at every call, so that one set after the Writer, Hook or
// Handler was built still counts.
func (c *config) propagator() propagation.TextMapPropagator {
	if c.prop != nil {
		return c.prop
	}
	g := otel.GetTextMapPropagator()
	if len(g.Fields()) == 0 {
		// The global is the SDK's default, a composite of nothing: it would
		// carry no context at all.
		return propagation.TraceContext{}
	}
	return g
}

// WithTracerProvider sets the tracer provider that makes the spans.
// Defaults to the global provider (otel.GetTracerProvider), looked up when
// the Writer, Hook or Handler is built, or at each call of Extract.
func WithTracerProvider(tp trace.TracerProvider) Opt {
	return optFunc(func(c *config) { c.tp = tp })
}

// WithPropagator sets the propagator that writes the trace context into a
// message's headers and reads it back. Its field names are turned into
// header names the Writer accepts (lower case, letters and digits only:
// "X-B3-TraceId" becomes "xb3traceid"), on both sides alike. Defaults to the
// global propagator (otel.GetTextMapPropagator) when one was set, else
// propagation.TraceContext, whose fields are the CloudEvents distributed
// tracing attributes traceparent and tracestate.
func WithPropagator(p propagation.TextMapPropagator) Opt {
	return optFunc(func(c *config) { c.prop = p })
}

// WithSystem sets the messaging.system attribute of the spans, e.g. "kafka",
// "rabbitmq" or "nats". Defaults to "outbox" (DefaultSystem).
func WithSystem(name string) Opt {
	return optFunc(func(c *config) {
		if name != "" {
			c.system = name
		}
	})
}

// WithMaxLinks caps the links of a Hook's batch span: the first n messages
// of a batch that carry a trace context get a link, the others none. 0
// links none; a negative n is taken as 0. Defaults to 128 (DefaultMaxLinks).
// The cost of OnBatch grows with n, not with the batch's size.
func WithMaxLinks(n int) Opt {
	return optFunc(func(c *config) { c.maxLinks = max(n, 0) })
}

// WithConsumerGroup sets the messaging.consumer.group.name attribute of
// Handler's spans. Defaults to none.
func WithConsumerGroup(group string) Opt {
	return optFunc(func(c *config) { c.group = group })
}

// WithLinkOnly makes Handler start each process span in a trace of its own,
// with a link to the producer's span, instead of as the producer's child.
// Use it when producers' traces should not grow with every consumer's work
// (a message fanned out to many groups, or redelivered for days). Defaults
// to false: the span is the producer's child, and links to it too.
func WithLinkOnly() Opt {
	return optFunc(func(c *config) { c.linkOnly = true })
}

package outboxotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-go/outbox"
)

// Handler returns an outbox.Handler that runs h inside a span "process
// <topic>" (span kind consumer) for each message, and ends the span when h
// returns, with h's error recorded and the span's status set to Error.
//
// The span continues the trace the message's headers carry (see Extract):
// it is the producer's child and also links to the producer's span, as
// OpenTelemetry's messaging conventions say a process span should link to
// the message's creation context (the parent is what the conventions allow
// for a span that processes a single message, and it keeps the producer's
// and the consumer's work in one trace). WithLinkOnly starts a new trace
// with the link alone instead. A message with no trace context gets a span
// that is the child of ctx's span, if any.
//
// ctx given to h carries the span (and the producer's baggage). Handler
// takes WithTracerProvider, WithPropagator, WithSystem, WithConsumerGroup
// and WithLinkOnly.
func Handler(h outbox.Handler, opts ...Opt) outbox.Handler {
	c := newConfig(opts)
	tracer := c.tracer()
	return func(ctx context.Context, m outbox.Message) (err error) {
		pctx, producer := ctx, trace.SpanContext{}
		if len(m.Headers) > 0 {
			pctx = c.propagator().Extract(ctx, headerCarrier(m.Headers))
			if sc := trace.SpanContextFromContext(pctx); !sc.Equal(trace.SpanContextFromContext(ctx)) {
				producer = sc
			}
		}
		attrs := make([]attribute.KeyValue, 0, 7)
		attrs = append(attrs,
			semconv.MessagingSystemKey.String(c.system),
			semconv.MessagingOperationName("process"),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(m.Topic),
			semconv.MessagingMessageID(m.MsgID),
			semconv.MessagingMessageBodySize(len(m.Payload)),
		)
		if c.group != "" {
			attrs = append(attrs, semconv.MessagingConsumerGroupName(c.group))
		}
		sopts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
		if producer.IsValid() {
			sopts = append(sopts, trace.WithLinks(trace.Link{SpanContext: producer}))
			if c.linkOnly {
				sopts = append(sopts, trace.WithNewRoot())
			}
		}
		sctx, span := tracer.Start(pctx, "process "+m.Topic, sopts...)
		defer func() {
			if p := recover(); p != nil {
				span.SetAttributes(semconv.ErrorTypeKey.String(ErrorTypePanic))
				span.SetStatus(codes.Error, "handler panicked")
				span.End()
				panic(p)
			}
			if err != nil {
				span.RecordError(err)
				span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}()
		return h(sctx, m)
	}
}

package outboxotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-go/outbox"
)

// Writer is an outbox.Writer that gives each message a "create" span and
// writes that span's context into the message's headers, so that the relay
// links to it and the consumers continue it.
type Writer[TTx any] struct {
	w      *outbox.Writer[TTx]
	cfg    config
	tracer trace.Tracer
}

// NewWriter returns a Writer that writes through w. It takes
// WithTracerProvider, WithPropagator and WithSystem.
func NewWriter[TTx any](w *outbox.Writer[TTx], opts ...Opt) *Writer[TTx] {
	c := newConfig(opts)
	return &Writer[TTx]{w: w, cfg: c, tracer: c.tracer()}
}

// Write writes msgs in tx with outbox.Writer.Write. Each message gets a
// span "create <topic>" (span kind producer, a child of ctx's span, ended
// when Write returns, with the error if there is one), and that span's
// context in its headers, as OpenTelemetry's messaging conventions say for
// messages sent in batches: the relay's batch span then links to one
// context per message.
//
// A message whose headers already carry a trace context keeps it and gets
// no span (the conventions' "custom creation context"). The caller's
// messages and their header maps are not changed. When the spans are not
// sampled and ctx carries no trace, Write is outbox.Writer.Write.
func (w *Writer[TTx]) Write(ctx context.Context, tx TTx, msgs ...outbox.Message) error {
	if len(msgs) == 0 {
		return w.w.Write(ctx, tx, msgs...)
	}
	prop := w.cfg.propagator()
	var out []outbox.Message
	var spans []trace.Span
	for i := range msgs {
		m := &msgs[i]
		if spanContext(prop, *m).IsValid() {
			continue
		}
		sctx, span := w.tracer.Start(ctx, "create "+m.Topic,
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(
				semconv.MessagingSystemKey.String(w.cfg.system),
				semconv.MessagingOperationName("create"),
				semconv.MessagingOperationTypeCreate,
				semconv.MessagingDestinationName(m.Topic),
				semconv.MessagingMessageID(m.MsgID),
				semconv.MessagingMessageBodySize(len(m.Payload)),
			))
		if !span.SpanContext().IsValid() {
			// No provider, no trace: nothing to carry.
			span.End()
			continue
		}
		spans = append(spans, span)
		if out == nil {
			out = make([]outbox.Message, len(msgs))
			copy(out, msgs)
		}
		inject(sctx, prop, &out[i])
	}
	if out == nil {
		return w.w.Write(ctx, tx, msgs...)
	}
	err := w.w.Write(ctx, tx, out...)
	for _, span := range spans {
		if err != nil {
			span.RecordError(err)
			span.SetAttributes(attribute.String(string(semconv.ErrorTypeKey), errorType(err)))
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	return err
}

// Validate is outbox.Writer.Validate.
func (w *Writer[TTx]) Validate(msgs ...outbox.Message) error { return w.w.Validate(msgs...) }

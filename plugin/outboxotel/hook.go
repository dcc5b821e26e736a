package outboxotel

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-go/outbox"
)

// Attributes of a Hook's batch span beyond the messaging conventions: the
// batch's outcome, counted per kind.
const (
	AttrSent     = attribute.Key("outbox.batch.sent")
	AttrRetried  = attribute.Key("outbox.batch.retried")
	AttrDead     = attribute.Key("outbox.batch.dead")
	AttrReleased = attribute.Key("outbox.batch.released")
)

// Hook is an outbox.WriteHook and an outbox.BatchHook: put it in
// outbox.WriterConfig.Hooks and outbox.RelayConfig.Hooks (one list can
// serve both). As a WriteHook it writes the trace context of each write
// into the messages' headers (see OnWrite); as a BatchHook it records each
// batch the relay finished as spans that link to those contexts.
//
// A batch becomes one span "send [topic]" (span kind client, a new trace),
// from the claim's start to the mark's end, with three children: "claim",
// "publish" and "mark". The relay calls OnBatch once the batch is marked,
// so the spans are built after the fact, with their times taken back from
// the report's durations (the mark ends when OnBatch is called).
//
// The batch span links to the creation context of each message that carries
// one (see Writer and Inject), up to WithMaxLinks (default 128), in id
// order; each link has the message's messaging.message.id. Messages the
// broker did not take (retried, dead, released) set the span's status to
// Error, count in its outbox.batch.* attributes, and the first 16 are
// recorded as error events. OnBatch's cost is bounded by the link cap, not
// by the batch's size; with a sampler that drops the span it builds no
// links at all.
type Hook struct {
	cfg    config
	tracer trace.Tracer
}

var (
	_ outbox.BatchHook = (*Hook)(nil)
	_ outbox.WriteHook = (*Hook)(nil)
)

// NewHook returns a Hook. It takes WithTracerProvider, WithPropagator,
// WithSystem and WithMaxLinks.
func NewHook(opts ...Opt) *Hook {
	c := newConfig(opts)
	return &Hook{cfg: c, tracer: c.tracer()}
}

// OnWrite implements outbox.WriteHook: every write of a Writer whose
// WriterConfig.Hooks holds h (Writer.Write, outboxpgx's QueueWrite and
// WriteOnCommit) writes the trace context of its ctx into each message's
// headers, as Inject does, so that no message has to be injected by hand.
// A message whose headers already carry a trace context keeps it. When
// ctx carries neither a valid span context nor baggage, OnWrite changes
// nothing and allocates nothing. It never fails.
//
// The messages carry the context of the span ctx holds; for a "create"
// span of each message's own, wrap the Writer in NewWriter instead.
func (h *Hook) OnWrite(ctx context.Context, msgs []outbox.Message) error {
	if !trace.SpanContextFromContext(ctx).IsValid() && baggage.FromContext(ctx).Len() == 0 {
		return nil
	}
	prop := h.cfg.propagator()
	for i := range msgs {
		m := &msgs[i]
		if spanContext(prop, *m).IsValid() {
			continue
		}
		// The Writer hands its hooks maps of their own: write into them.
		if m.Headers == nil {
			m.Headers = make(map[string]string, 2)
		}
		prop.Inject(ctx, headerCarrier(m.Headers))
	}
	return nil
}

// OnBatch records rep as spans.
func (h *Hook) OnBatch(ctx context.Context, rep outbox.BatchReport) {
	end := time.Now()
	n := len(rep.Results)
	if n == 0 {
		return
	}
	start := end.Add(-rep.Duration)
	name, topic := "send", sameTopic(rep.Results)
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs,
		semconv.MessagingSystemKey.String(h.cfg.system),
		semconv.MessagingOperationName("send"),
		semconv.MessagingOperationTypeSend,
	)
	if topic != "" {
		name += " " + topic
		attrs = append(attrs, semconv.MessagingDestinationName(topic))
	}
	if n == 1 {
		attrs = append(attrs, semconv.MessagingMessageID(rep.Results[0].Message.MsgID))
	} else {
		attrs = append(attrs, semconv.MessagingBatchMessageCount(n))
	}
	attrs = append(attrs, AttrSent.Int(rep.Sent), AttrRetried.Int(rep.Retried),
		AttrDead.Int(rep.Dead), AttrReleased.Int(rep.Released))
	bctx, span := h.tracer.Start(ctx, name,
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(start),
		trace.WithAttributes(attrs...))
	if !span.IsRecording() {
		span.End(trace.WithTimestamp(end))
		return
	}
	h.link(span, rep.Results)
	if failed := n - rep.Sent; failed > 0 {
		h.recordFailures(span, rep.Results, end)
		span.SetStatus(codes.Error, fmt.Sprintf("%d of %d messages not sent", failed, n))
	}

	markStart := end.Add(-rep.MarkDuration)
	pubStart := markStart.Add(-rep.PublishDuration)
	h.child(bctx, "claim", start, start.Add(rep.ClaimDuration))
	h.child(bctx, "publish", pubStart, markStart)
	h.child(bctx, "mark", markStart, end)
	span.End(trace.WithTimestamp(end))
}

// link adds a link to the creation context of each message, up to the cap.
func (h *Hook) link(span trace.Span, results []outbox.MessageResult) {
	if h.cfg.maxLinks == 0 {
		return
	}
	prop := h.cfg.propagator()
	links := 0
	for i := range results {
		m := &results[i].Message
		if len(m.Headers) == 0 {
			continue
		}
		sc := spanContext(prop, *m)
		if !sc.IsValid() {
			continue
		}
		span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{semconv.MessagingMessageID(m.MsgID)}})
		if links++; links == h.cfg.maxLinks {
			return
		}
	}
}

// recordFailures records the first failed messages as error events, and the
// batch's error.type: that of the first failure.
func (h *Hook) recordFailures(span trace.Span, results []outbox.MessageResult, at time.Time) {
	events := 0
	for i := range results {
		r := &results[i]
		if r.Outcome.Kind == outbox.OutcomeSent {
			continue
		}
		err := r.Err
		if err == nil {
			err = fmt.Errorf("outbox: %s", r.Outcome.Error)
		}
		if events == 0 {
			span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
		}
		span.RecordError(err, trace.WithTimestamp(at), trace.WithAttributes(
			semconv.MessagingMessageID(r.Message.MsgID),
			attribute.String("outbox.outcome", outcomeName(r.Outcome.Kind)),
		))
		if events++; events == maxErrorEvents {
			return
		}
	}
}

func (h *Hook) child(ctx context.Context, name string, start, end time.Time) {
	_, s := h.tracer.Start(ctx, name, trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindInternal))
	s.End(trace.WithTimestamp(end))
}

// sameTopic returns the topic of every message, or "" when they differ.
func sameTopic(results []outbox.MessageResult) string {
	t := results[0].Message.Topic
	for i := 1; i < len(results); i++ {
		if results[i].Message.Topic != t {
			return ""
		}
	}
	return t
}

func outcomeName(k outbox.OutcomeKind) string {
	switch k {
	case outbox.OutcomeSent:
		return "sent"
	case outbox.OutcomeRetry:
		return "retry"
	case outbox.OutcomeDead:
		return "dead"
	case outbox.OutcomeRelease:
		return "release"
	}
	return "unknown"
}

package outboxotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
	"github.com/outbox-go/outbox/outboxdriver"
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

func TestInjectExtract(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ts, err := trace.ParseTraceState("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
	if err != nil {
		t.Fatal(err)
	}
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true,
	})
	ctx, span := b.tp.Tracer("test").Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "checkout")
	shared := map[string]string{"tenant": "eu1"}
	m := outbox.Message{MsgID: "m1", Topic: "order.paid", Payload: []byte(`{}`), Headers: shared}
	outboxotel.Inject(ctx, &m, b.opts...)
	span.End()

	if len(shared) != 1 {
		t.Errorf("Inject changed the caller's map: %v", shared)
	}
	want := fmt.Sprintf("00-%s-%s-01", span.SpanContext().TraceID(), span.SpanContext().SpanID())
	if got := m.Headers[outboxotel.TraceParentHeader]; got != want {
		t.Errorf("traceparent = %q, want %q", got, want)
	}
	if got := m.Headers[outboxotel.TraceStateHeader]; got != ts.String() {
		t.Errorf("tracestate = %q, want %q", got, ts.String())
	}
	if m.Headers["tenant"] != "eu1" {
		t.Errorf("headers lost tenant: %v", m.Headers)
	}
	// The Writer accepts these headers, and every transport carries them as
	// extension attributes under the same names.
	if err := newTestWriter(t).Validate(m); err != nil {
		t.Errorf("Validate: %v", err)
	}
	for _, a := range cloudevents.Extensions(m.Headers) {
		if m.Headers[a.Name] != a.Value {
			t.Errorf("extension %s=%q does not match the header", a.Name, a.Value)
		}
	}

	got := trace.SpanContextFromContext(outboxotel.Extract(context.Background(), m, b.opts...))
	if !got.IsRemote() || got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() ||
		got.TraceState().String() != ts.String() || !got.IsSampled() {
		t.Errorf("Extract = %+v, want the span's context %+v", got, span.SpanContext())
	}
	if sc := outboxotel.SpanContext(m, b.opts...); !sc.Equal(got) {
		t.Errorf("SpanContext = %+v, want %+v", sc, got)
	}
}

// TestInjectNoTrace is not parallel: AllocsPerRun refuses to be.
func TestInjectNoTrace(t *testing.T) {
	b := setup(t)
	m := outbox.Message{MsgID: "m1", Topic: "t"}
	outboxotel.Inject(context.Background(), &m, b.opts...)
	if m.Headers != nil {
		t.Errorf("Inject without a trace set headers %v", m.Headers)
	}
	allocs := testing.AllocsPerRun(100, func() { outboxotel.Inject(context.Background(), &m) })
	if allocs != 0 {
		t.Errorf("Inject without a trace allocates %v times, want 0", allocs)
	}
	if ctx := outboxotel.Extract(context.Background(), m, b.opts...); trace.SpanContextFromContext(ctx).IsValid() {
		t.Errorf("Extract of a message without headers found a span context")
	}
}

// b3Like is a propagator whose field names are not CloudEvents attribute
// names, as B3's and Jaeger's are not.
type b3Like struct{}

func (b3Like) Inject(ctx context.Context, c propagation.TextMapCarrier) {
	sc := trace.SpanContextFromContext(ctx)
	c.Set("X-B3-TraceId", sc.TraceID().String())
	c.Set("X-B3-SpanId", sc.SpanID().String())
	c.Set("id", "must not shadow the msg_id")
}

func (b3Like) Extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	tid, err1 := trace.TraceIDFromHex(c.Get("X-B3-TraceId"))
	sid, err2 := trace.SpanIDFromHex(c.Get("X-B3-SpanId"))
	if err1 != nil || err2 != nil {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
}

func (b3Like) Fields() []string { return []string{"X-B3-TraceId", "X-B3-SpanId", "id"} }

func TestPropagatorFieldNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opts := []outboxotel.Opt{outboxotel.WithTracerProvider(b.tp), outboxotel.WithPropagator(b3Like{})}
	ctx, span := b.tp.Tracer("test").Start(context.Background(), "p")
	defer span.End()
	m := outbox.Message{MsgID: "m1", Topic: "t", Payload: []byte(`{}`)}
	outboxotel.Inject(ctx, &m, opts...)
	if m.Headers["xb3traceid"] != span.SpanContext().TraceID().String() || m.Headers["xb3spanid"] == "" {
		t.Errorf("headers = %v, want xb3traceid and xb3spanid", m.Headers)
	}
	if _, ok := m.Headers["id"]; ok {
		t.Errorf("Inject wrote the reserved attribute id: %v", m.Headers)
	}
	if err := newTestWriter(t).Validate(m); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if got := outboxotel.SpanContext(m, opts...); got.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("SpanContext = %v, want span %v", got.SpanID(), span.SpanContext().SpanID())
	}
}

// fakeDriver is an outboxdriver.Driver that keeps what the Writer inserts.
type fakeDriver struct {
	outboxdriver.Store
	inserted []outbox.Message
	err      error
}

type fakeTx struct{}

func (d *fakeDriver) InsertTx(_ context.Context, _ fakeTx, msgs []outbox.Message) error {
	if d.err != nil {
		return d.err
	}
	d.inserted = append(d.inserted, msgs...)
	return nil
}

func (d *fakeDriver) MarkConsumedTx(context.Context, fakeTx, string, string) (bool, error) {
	return false, errors.New("not used")
}

func (d *fakeDriver) RunInTx(context.Context, func(context.Context, fakeTx) error) error {
	return errors.New("not used")
}

func newTestWriter(t *testing.T) *outbox.Writer[fakeTx] {
	w, err := outbox.NewWriter[fakeTx](&fakeDriver{}, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWriter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	drv := &fakeDriver{}
	w, err := outbox.NewWriter[fakeTx](drv, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ow := outboxotel.NewWriter(w, append(b.opts, outboxotel.WithSystem("nats"))...)
	ctx, parent := b.tp.Tracer("test").Start(context.Background(), "checkout")
	custom := "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"
	msgs := []outbox.Message{
		{MsgID: "a", Topic: "order.paid", Payload: []byte(`{}`)},
		{MsgID: "b", Topic: "order.shipped", Payload: []byte(`{}`), Headers: map[string]string{"traceparent": custom}},
	}
	if err := ow.Write(ctx, fakeTx{}, msgs...); err != nil {
		t.Fatal(err)
	}
	parent.End()
	if msgs[0].Headers != nil {
		t.Errorf("Write changed the caller's message: %v", msgs[0].Headers)
	}
	create := b.span(t, "create order.paid")
	if create.SpanKind() != trace.SpanKindProducer || create.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("create span: kind %v parent %v, want producer, child of %v", create.SpanKind(), create.Parent().SpanID(), parent.SpanContext().SpanID())
	}
	for k, want := range map[string]string{"messaging.system": "nats", "messaging.operation.type": "create",
		"messaging.destination.name": "order.paid", "messaging.message.id": "a"} {
		if got := attr(create, k).String(); got != want {
			t.Errorf("create span %s = %q, want %q", k, got, want)
		}
	}
	if got := drv.inserted[0].Headers["traceparent"]; !strings.Contains(got, create.SpanContext().SpanID().String()) {
		t.Errorf("inserted traceparent %q does not carry the create span %v", got, create.SpanContext().SpanID())
	}
	if got := drv.inserted[1].Headers["traceparent"]; got != custom {
		t.Errorf("a message's own trace context was replaced: %q, want %q", got, custom)
	}
	if n := len(b.rec.Ended()); n != 2 {
		t.Errorf("%d spans (%s), want create order.paid and checkout only", n, names(b.rec.Ended()))
	}

	// A failed write ends the span with the error.
	drv.err = &outbox.DuplicateError{MsgIDs: []string{"c"}}
	err = ow.Write(context.Background(), fakeTx{}, outbox.Message{MsgID: "c", Topic: "dup", Payload: []byte(`{}`)})
	if !errors.Is(err, outbox.ErrDuplicate) {
		t.Fatalf("Write = %v, want ErrDuplicate", err)
	}
	failed := b.span(t, "create dup")
	if failed.Status().Code != codes.Error || attr(failed, "error.type").AsString() != outboxotel.ErrorTypeDuplicate {
		t.Errorf("failed create span: status %v, error.type %q", failed.Status(), attr(failed, "error.type").AsString())
	}
}

func TestWriterTracingOff(t *testing.T) {
	t.Parallel()
	drv := &fakeDriver{}
	w, err := outbox.NewWriter[fakeTx](drv, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ow := outboxotel.NewWriter(w, outboxotel.WithTracerProvider(noop.NewTracerProvider()))
	if err := ow.Write(context.Background(), fakeTx{}, outbox.Message{MsgID: "a", Topic: "t", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if h := drv.inserted[0].Headers; h != nil {
		t.Errorf("no provider, no trace: headers %v, want none", h)
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, producer := b.tp.Tracer("test").Start(context.Background(), "checkout")
	m := outbox.Message{MsgID: "m1", Topic: "order.paid", Payload: []byte(`{"a":1}`)}
	outboxotel.Inject(ctx, &m, b.opts...)
	producer.End()

	var inside trace.SpanContext
	h := outboxotel.Handler(func(ctx context.Context, _ outbox.Message) error {
		inside = trace.SpanContextFromContext(ctx)
		return nil
	}, append(b.opts, outboxotel.WithConsumerGroup("billing"))...)
	if err := h(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	s := b.span(t, "process order.paid")
	if s.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("kind %v, want consumer", s.SpanKind())
	}
	if s.Parent().SpanID() != producer.SpanContext().SpanID() || s.SpanContext().TraceID() != producer.SpanContext().TraceID() {
		t.Errorf("process span's parent %v in trace %v, want the producer %v", s.Parent().SpanID(), s.SpanContext().TraceID(), producer.SpanContext())
	}
	if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != producer.SpanContext().SpanID() {
		t.Errorf("links %+v, want one to the producer", s.Links())
	}
	if inside.SpanID() != s.SpanContext().SpanID() {
		t.Errorf("the handler ran in span %v, want the process span %v", inside.SpanID(), s.SpanContext().SpanID())
	}
	for k, want := range map[string]string{"messaging.operation.type": "process", "messaging.message.id": "m1",
		"messaging.consumer.group.name": "billing", "messaging.system": "outbox", "messaging.message.body.size": "7"} {
		if got := attr(s, k).String(); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if s.Status().Code == codes.Error {
		t.Errorf("status %v after success", s.Status())
	}
}

func TestHandlerError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := outbox.Permanent(errors.New("bad payload"))
	h := outboxotel.Handler(func(context.Context, outbox.Message) error { return want }, b.opts...)
	if err := h(context.Background(), outbox.Message{MsgID: "m1", Topic: "t"}); err != want {
		t.Fatalf("Handler returned %v, want h's error", err)
	}
	s := b.span(t, "process t")
	if s.Status().Code != codes.Error || attr(s, "error.type").AsString() != outboxotel.ErrorTypePermanent {
		t.Errorf("status %v, error.type %q", s.Status(), attr(s, "error.type").AsString())
	}
	if len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
		t.Errorf("events %+v, want the error recorded", s.Events())
	}
	if s.Parent().IsValid() || len(s.Links()) != 0 {
		t.Errorf("a message without trace context: parent %v, links %v, want a root span without links", s.Parent(), s.Links())
	}
}

func TestHandlerPanic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := outboxotel.Handler(func(context.Context, outbox.Message) error { panic("boom") }, b.opts...)
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want the handler's panic", p)
			}
		}()
		_ = h(context.Background(), outbox.Message{MsgID: "m1", Topic: "t"})
	}()
	if s := b.span(t, "process t"); s.Status().Code != codes.Error {
		t.Errorf("status %v after a panic, want Error", s.Status())
	}
}

func TestHandlerLinkOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, producer := b.tp.Tracer("test").Start(context.Background(), "checkout")
	m := outbox.Message{MsgID: "m1", Topic: "t"}
	outboxotel.Inject(ctx, &m, b.opts...)
	producer.End()
	h := outboxotel.Handler(func(context.Context, outbox.Message) error { return nil }, append(b.opts, outboxotel.WithLinkOnly())...)
	if err := h(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	s := b.span(t, "process t")
	if s.Parent().IsValid() || s.SpanContext().TraceID() == producer.SpanContext().TraceID() {
		t.Errorf("WithLinkOnly: parent %v trace %v, want a new trace", s.Parent(), s.SpanContext().TraceID())
	}
	if len(s.Links()) != 1 || !s.Links()[0].SpanContext.Equal(outboxotel.SpanContext(m, b.opts...)) {
		t.Errorf("links %+v, want one to the producer", s.Links())
	}
}

// report makes a BatchReport of n messages of topic, each carrying the
// context of a span of its own, as a relay hands it to its hooks.
func report(t *testing.T, b *bundle, n int, topic string) (outbox.BatchReport, []trace.SpanContext) {
	t.Helper()
	rep := outbox.BatchReport{Results: make([]outbox.MessageResult, n), Sent: n,
		Duration: 40 * time.Millisecond, ClaimDuration: 5 * time.Millisecond,
		PublishDuration: 20 * time.Millisecond, MarkDuration: 10 * time.Millisecond}
	scs := make([]trace.SpanContext, n)
	for i := range rep.Results {
		ctx, span := b.tp.Tracer("test").Start(context.Background(), "producer")
		m := outbox.Message{MsgID: fmt.Sprintf("m%d", i), Topic: topic, Headers: map[string]string{"tenant": "eu1"}}
		outboxotel.Inject(ctx, &m, b.opts...)
		span.End()
		scs[i] = span.SpanContext()
		rep.Results[i] = outbox.MessageResult{Message: m, Outcome: outbox.Outcome{Kind: outbox.OutcomeSent}}
	}
	return rep, scs
}

func TestHook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep, scs := report(t, b, 3, "order.paid")
	// The relay's context may carry a span of its own; batches are not its children.
	rctx, runSpan := b.tp.Tracer("test").Start(context.Background(), "run")
	before := time.Now()
	outboxotel.NewHook(b.opts...).OnBatch(rctx, rep)
	after := time.Now()
	runSpan.End()

	s := b.span(t, "send order.paid")
	if s.SpanKind() != trace.SpanKindClient || s.Parent().IsValid() {
		t.Errorf("batch span: kind %v parent %v, want client, a root", s.SpanKind(), s.Parent())
	}
	if d := s.EndTime().Sub(s.StartTime()); d != rep.Duration {
		t.Errorf("batch span lasts %v, want the batch's %v", d, rep.Duration)
	}
	if s.EndTime().Before(before) || s.EndTime().After(after) {
		t.Errorf("batch span ends at %v, want when OnBatch ran", s.EndTime())
	}
	for k, want := range map[string]string{"messaging.operation.type": "send", "messaging.operation.name": "send",
		"messaging.batch.message_count": "3", "messaging.destination.name": "order.paid", "outbox.batch.sent": "3"} {
		if got := attr(s, k).String(); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if len(s.Links()) != 3 {
		t.Fatalf("%d links, want 3", len(s.Links()))
	}
	for i, l := range s.Links() {
		if l.SpanContext.SpanID() != scs[i].SpanID() || l.Attributes[0].Value.AsString() != rep.Results[i].Message.MsgID {
			t.Errorf("link %d: %v %v, want the producer %v of %s", i, l.SpanContext.SpanID(), l.Attributes, scs[i].SpanID(), rep.Results[i].Message.MsgID)
		}
	}
	for _, c := range []struct {
		name       string
		start, end time.Time
	}{
		{"claim", s.StartTime(), s.StartTime().Add(rep.ClaimDuration)},
		{"publish", s.EndTime().Add(-rep.MarkDuration - rep.PublishDuration), s.EndTime().Add(-rep.MarkDuration)},
		{"mark", s.EndTime().Add(-rep.MarkDuration), s.EndTime()},
	} {
		cs := b.span(t, c.name)
		if cs.Parent().SpanID() != s.SpanContext().SpanID() || !cs.StartTime().Equal(c.start) || !cs.EndTime().Equal(c.end) {
			t.Errorf("%s span: parent %v, %v..%v, want child of the batch, %v..%v", c.name, cs.Parent().SpanID(), cs.StartTime(), cs.EndTime(), c.start, c.end)
		}
	}
}

func TestHookLinkCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep, scs := report(t, b, 10, "t")
	rep.Results[0].Message.Headers = nil // no context: no link, and not counted
	outboxotel.NewHook(append(b.opts, outboxotel.WithMaxLinks(4))...).OnBatch(context.Background(), rep)
	s := b.span(t, "send t")
	if len(s.Links()) != 4 {
		t.Fatalf("%d links, want the cap of 4", len(s.Links()))
	}
	for i, l := range s.Links() {
		if l.SpanContext.SpanID() != scs[i+1].SpanID() {
			t.Errorf("link %d is to %v, want message %d's producer", i, l.SpanContext.SpanID(), i+1)
		}
	}
}

func TestHookFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep, _ := report(t, b, 40, "t")
	for i := range rep.Results[:30] {
		rep.Results[i].Outcome = outbox.Outcome{Kind: outbox.OutcomeRelease}
		rep.Results[i].Err = outbox.Unavailable(errors.New("connection refused"))
	}
	rep.Results[35].Outcome = outbox.Outcome{Kind: outbox.OutcomeDead, Error: "too large"}
	rep.Results[35].Err = errors.New("too large")
	rep.Sent, rep.Released, rep.Dead = 9, 30, 1
	outboxotel.NewHook(b.opts...).OnBatch(context.Background(), rep)
	s := b.span(t, "send t")
	if s.Status().Code != codes.Error || s.Status().Description != "31 of 40 messages not sent" {
		t.Errorf("status %+v", s.Status())
	}
	if got := attr(s, "error.type").AsString(); got != outboxotel.ErrorTypeUnavailable {
		t.Errorf("error.type %q, want %q", got, outboxotel.ErrorTypeUnavailable)
	}
	if n := len(s.Events()); n != 16 {
		t.Errorf("%d error events, want the cap of 16", n)
	}
	if got := attr(s, "outbox.batch.released").AsInt64(); got != 30 {
		t.Errorf("outbox.batch.released = %d, want 30", got)
	}
}

func TestHookSingleMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep, _ := report(t, b, 1, "t")
	outboxotel.NewHook(b.opts...).OnBatch(context.Background(), rep)
	s := b.span(t, "send t")
	if attr(s, "messaging.message.id").AsString() != "m0" || attr(s, "messaging.batch.message_count").Type() != attribute.EMPTY {
		t.Errorf("a batch of one: %v", s.Attributes())
	}
}

func TestHookNotSampled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rep, _ := report(t, b, 3, "t")
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.NeverSample()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	outboxotel.NewHook(outboxotel.WithTracerProvider(tp)).OnBatch(context.Background(), rep)
	outboxotel.NewHook(outboxotel.WithTracerProvider(tp)).OnBatch(context.Background(), outbox.BatchReport{})
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("%d spans recorded with sampling off", n)
	}
}

func TestHookInRelayConfig(t *testing.T) {
	t.Parallel()
	var drv fakeDriver
	if _, err := outbox.NewRelay(&drv, outbox.Discard, outbox.RelayConfig{Hooks: []any{outboxotel.NewHook()}}); err != nil {
		t.Fatalf("NewRelay refused the hook: %v", err)
	}
}

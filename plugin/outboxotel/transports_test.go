package outboxotel_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
	"github.com/outbox-go/outbox/plugin/outboxotel"
	"github.com/outbox-go/outbox/webhook"
)

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

// TestWebhookCarriesTraceContext publishes through the webhook publisher to
// a real HTTP server, which rebuilds the message from the ce- headers as
// the CloudEvents HTTP binding says and hands it to Handler.
func TestWebhookCarriesTraceContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sent, producer := tracedMessage(t, b, "order.paid")
	type arrival struct {
		m      outbox.Message
		inside trace.SpanContext
		raw    http.Header
		err    error
	}
	arrived := make(chan arrival, 1)
	h := outboxotel.Handler(func(ctx context.Context, m outbox.Message) error {
		arrived <- arrival{m: m, inside: trace.SpanContextFromContext(ctx)}
		return nil
	}, b.opts...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		attrs := map[string]string{cloudevents.ContentType: r.Header.Get("Content-Type")}
		for name, vs := range r.Header {
			if n := strings.ToLower(name); strings.HasPrefix(n, "ce-") {
				attrs[n[3:]] = cloudevents.PercentDecode(vs[0])
			}
		}
		m, err := cloudevents.Decode(attrs, body)
		if err != nil {
			arrived <- arrival{err: err, raw: r.Header}
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_ = h(r.Context(), m)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	pub, err := webhook.New(webhook.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Close() }()
	if errs := pub.Publish(context.Background(), []outbox.Message{sent}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	a := <-arrived
	if a.err != nil {
		t.Fatalf("decode: %v (headers %v)", a.err, a.raw)
	}
	checkReceived(t, b, sent, a.m, a.inside, producer)
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

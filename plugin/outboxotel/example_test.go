package outboxotel_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/plugin/outboxotel"
)

// Inject puts the producer's span context in the message's headers, as the
// CloudEvents distributed tracing attributes traceparent and tracestate;
// Writer.Write then stores them with the row. The span context here is
// fixed, so that the output is too.
func ExampleInject() {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)

	m := outbox.Message{MsgID: "order-42:OrderPaid", Topic: "order.paid", Payload: []byte(`{"order":42}`)}
	outboxotel.Inject(ctx, &m, outboxotel.WithPropagator(propagation.TraceContext{}))
	fmt.Println(m.Headers[outboxotel.TraceParentHeader])
	// Output:
	// 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
}

// Handler runs the consumer's handler in a process span, the child of the
// producer's span whose context the message carries.
func ExampleHandler() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	opts := []outboxotel.Opt{outboxotel.WithTracerProvider(tp), outboxotel.WithPropagator(propagation.TraceContext{})}

	// The producer's side.
	ctx, producer := tp.Tracer("shop").Start(context.Background(), "checkout")
	m := outbox.Message{MsgID: "order-42:OrderPaid", Topic: "order.paid", Payload: []byte(`{"order":42}`)}
	outboxotel.Inject(ctx, &m, opts...)
	producer.End()

	// The consumer's side, as a subscriber's Run calls it.
	h := outboxotel.Handler(func(ctx context.Context, m outbox.Message) error {
		return errors.New("the points service is down")
	}, append(opts, outboxotel.WithConsumerGroup("points"))...)
	err := h(context.Background(), m)

	process := rec.Ended()[1]
	fmt.Println(process.Name(), process.SpanKind())
	fmt.Println("same trace:", process.SpanContext().TraceID() == producer.SpanContext().TraceID())
	fmt.Println("child of the producer:", process.Parent().SpanID() == producer.SpanContext().SpanID())
	fmt.Println("status:", process.Status().Code, err)
	// Output:
	// process order.paid consumer
	// same trace: true
	// child of the producer: true
	// status: Error the points service is down
}

// NewHook records each batch the relay finishes as a span that links to
// the producers' spans. The report here stands for one a Relay hands its
// hooks.
func ExampleNewHook() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	opts := []outboxotel.Opt{outboxotel.WithTracerProvider(tp), outboxotel.WithPropagator(propagation.TraceContext{})}
	hook := outboxotel.NewHook(append(opts, outboxotel.WithSystem("nats"), outboxotel.WithMaxLinks(100))...)
	// In a program, the same list of hooks goes to the writer, whose
	// messages then carry their writer's trace context, and to the relay:
	//
	//	hooks := []outbox.Hook{hook}
	//	w, err := outbox.NewWriter(drv, outbox.WriterConfig{Hooks: hooks})
	//	relay, err := outbox.NewRelay(drv, pub, outbox.RelayConfig{Hooks: hooks})

	rep := outbox.BatchReport{Duration: 3 * time.Millisecond, PublishDuration: 2 * time.Millisecond}
	for i := range 3 {
		ctx, span := tp.Tracer("shop").Start(context.Background(), "checkout")
		m := outbox.Message{MsgID: fmt.Sprintf("order-%d:OrderPaid", i), Topic: "order.paid"}
		outboxotel.Inject(ctx, &m, opts...)
		span.End()
		rep.Results = append(rep.Results, outbox.MessageResult{Message: m, Outcome: outbox.Outcome{Kind: outbox.OutcomeSent}})
		rep.Sent++
	}
	hook.OnBatch(context.Background(), rep)

	for _, s := range rec.Ended()[3:] {
		fmt.Println(s.Name(), s.SpanKind(), "links:", len(s.Links()))
	}
	// Output:
	// claim internal links: 0
	// publish internal links: 0
	// mark internal links: 0
	// send order.paid client links: 3
}

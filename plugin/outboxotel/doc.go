// Package outboxotel traces messages through the outbox with OpenTelemetry:
// from the business transaction that writes a message, through the relay
// that publishes it, to the consumer that handles it, on every transport the
// outbox has.
//
// # Where the trace context travels
//
// A message carries its producer's trace context in two of its headers,
// "traceparent" and "tracestate" (W3C Trace Context). These are the names of
// the CloudEvents Distributed Tracing extension's attributes, and every
// transport carries a message's headers as CloudEvents extension attributes
// (DESIGN §4): the context reaches the consumer as "ce-traceparent" over the
// webhook and NATS, "ce_traceparent" in Kafka and Redis, "cloudEvents_traceparent"
// in RabbitMQ and a user property in MQTT, and each broker module's
// subscriber hands it back in outbox.Message.Headers, with no change to the
// adapters. Both names are lower-case letters only, as the Writer's header
// validation asks, and neither is an attribute the relay sets itself. A
// row written in sidecar mode by a program in another language can carry
// the same two headers.
//
// # The three sides
//
//   - Producer: NewHook's Hook, in outbox.WriterConfig.Hooks, writes the
//     span context of each write's ctx into its messages, whichever write
//     path the program takes (Writer.Write, outboxpgx's QueueWrite and
//     WriteOnCommit). Or NewWriter wraps the Writer and gives each message
//     a "create" span of its own, whose context the message carries; or
//     Inject writes the span context of ctx into one message by hand.
//   - Relay: the same Hook, in outbox.RelayConfig.Hooks, records each batch
//     as a "send" span linked to the producers' contexts (at most
//     DefaultMaxLinks per batch; see WithMaxLinks). One list of hooks can
//     be given to the Writer and the Relay both.
//   - Consumer: Handler wraps an outbox.Handler and runs it in a "process"
//     span, the producer's child (or, WithLinkOnly, linked to it only).
//
// The spans follow OpenTelemetry's semantic conventions for messaging
// (semconv v1.43.0: messaging.system, messaging.operation.name and .type,
// messaging.destination.name = the topic, messaging.message.id = the
// msg_id, messaging.batch.message_count), and their error.type values are
// the ErrorType constants.
//
// # Propagator
//
// The propagator is the global one (otel.SetTextMapPropagator) when the
// program set one, else propagation.TraceContext: the SDK's default global
// propagator carries nothing, and a trace lost without a word is worse than
// the W3C headers CloudEvents names. WithPropagator picks another; field
// names that are not lower-case letters and digits become such names on
// both sides ("X-B3-TraceId" is written and read as "xb3traceid").
//
// With no tracer provider set, or spans not sampled and no trace in ctx,
// Inject, Hook.OnWrite and Writer.Write add nothing to a message and cost
// next to nothing.
package outboxotel

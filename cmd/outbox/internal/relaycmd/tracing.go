package relaycmd

import (
	"context"
	"errors"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/plugin/outboxotel"
)

// Version is the service.version of the relay's traces. The outbox binary
// sets it from its build information before it runs a command.
var Version = "devel"

// tracingNote is what "outbox relay --help" says about the OTEL_ variables.
const tracingNote = "Tracing: with OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set (or\n" +
	"OTEL_TRACES_EXPORTER=otlp), each batch becomes an OpenTelemetry span \"send <topic>\" linked to the\n" +
	"producers' trace contexts (the traceparent header), exported over OTLP: OTEL_EXPORTER_OTLP_PROTOCOL\n" +
	"http/protobuf (the default) or grpc; OTEL_EXPORTER_OTLP_HEADERS (never logged), _TIMEOUT, _CERTIFICATE,\n" +
	"_CLIENT_CERTIFICATE, _CLIENT_KEY, _COMPRESSION; OTEL_SERVICE_NAME (default outbox),\n" +
	"OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and _ARG, OTEL_BSP_*. OTEL_SDK_DISABLED=true or\n" +
	"OTEL_TRACES_EXPORTER=none turn it off; with none of these set no exporter runs."

// tracing is the span export the OTEL_ variables asked for.
type tracing struct {
	hook     outbox.BatchHook
	provider *sdktrace.TracerProvider
}

// startTracing reads the OTEL_ variables through getenv and, when they ask
// for spans, returns an outboxotel hook whose spans an OTLP exporter sends;
// nil, with no exporter started, when they do not. system is the broker
// URL's scheme, for the messaging.system attribute.
func startTracing(ctx context.Context, getenv func(string) string, log *slog.Logger, system string) (*tracing, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	endpoint := firstEnv(getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	switch e := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); e {
	case "none":
		return nil, nil
	case "":
		if endpoint == "" {
			return nil, nil
		}
	case "otlp":
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: outbox exports spans with otlp, or none", e)
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		for _, kv := range strings.Split(getenv(name), ",") {
			_, v, _ := strings.Cut(kv, "=")
			cli.AddSecret(strings.TrimSpace(v))
			if dec, err := url.QueryUnescape(strings.TrimSpace(v)); err == nil {
				cli.AddSecret(dec)
			}
		}
	}
	protocol := firstEnv(getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	var exp sdktrace.SpanExporter
	var err error
	switch protocol {
	case "", "http/protobuf":
		protocol = "http/protobuf"
		var c *otlpHTTP
		if c, err = newOTLPHTTP(getenv); err == nil {
			exp, err = otlptrace.New(ctx, c)
		}
	case "grpc":
		exp, err = newGRPCExporter(ctx) // it reads the OTEL_EXPORTER_OTLP_ variables itself
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: use http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %s; check the OTEL_EXPORTER_OTLP_ variables", cli.Scrub(cli.OneLine(err.Error())))
	}
	// The variables win over the defaults: WithFromEnv comes last.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("outbox"), semconv.ServiceVersion(Version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %v", err)
	}
	// The provider reads OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG and OTEL_BSP_*.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	otel.SetErrorHandler(&otelErrors{log: log})
	service, _ := res.Set().Value(semconv.ServiceNameKey)
	log.Info("tracing on", "protocol", protocol, "endpoint", cli.RedactDSN(endpoint), "service", service.AsString())
	return &tracing{
		hook:     outboxotel.NewHook(outboxotel.WithTracerProvider(tp), outboxotel.WithSystem(messagingSystem(system))),
		provider: tp,
	}, nil
}

// shutdown sends the spans not sent yet, for at most 5 seconds.
func (t *tracing) shutdown() {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = t.provider.Shutdown(ctx) // a failure went to otelErrors already
}

func firstEnv(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// messagingSystem is the messaging.system attribute for a broker scheme.
func messagingSystem(scheme string) string {
	switch strings.ToLower(scheme) {
	case "amqp", "amqps":
		return "rabbitmq"
	case "kafka":
		return "kafka"
	case "nats", "tls":
		return "nats"
	case "redis", "rediss":
		return "redis"
	case "mqtt", "mqtts":
		return "mqtt"
	case "http", "https":
		return "webhook"
	}
	return outboxotel.DefaultSystem
}

// otelErrors logs the SDK's errors (a collector that cannot be reached) at
// warn level, one line a minute at most.
type otelErrors struct {
	log  *slog.Logger
	mu   sync.Mutex
	last time.Time
}

func (h *otelErrors) Handle(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.last) < time.Minute {
		return
	}
	h.last = time.Now()
	h.log.Warn("tracing: spans not exported", "error", cli.Scrub(cli.OneLine(err.Error())))
}

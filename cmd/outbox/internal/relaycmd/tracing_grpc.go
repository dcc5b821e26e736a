//go:build !nodevbrokers

package relaycmd

import (
	"context"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newGRPCExporter returns the OTLP/gRPC exporter, which reads the
// OTEL_EXPORTER_OTLP_ variables itself.
func newGRPCExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	return otlptracegrpc.New(ctx)
}

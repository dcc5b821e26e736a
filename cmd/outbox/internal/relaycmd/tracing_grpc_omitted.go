//go:build nodevbrokers

package relaycmd

import (
	"context"
	"errors"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newGRPCExporter: the release build (tag nodevbrokers) leaves out the
// gRPC client, which would add about half to the binary's size.
func newGRPCExporter(context.Context) (sdktrace.SpanExporter, error) {
	return nil, errors.New("this outbox binary (a release build) has no OTLP/gRPC exporter; set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf")
}

package relaycmd

import (
	"log/slog"
	"testing"
)

// TestTracingOff: without the OTEL_ variables, or with them turned off, no
// exporter starts.
func TestTracingOff(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	for _, env := range []map[string]string{
		{},
		{"OTEL_SERVICE_NAME": "x", "OTEL_RESOURCE_ATTRIBUTES": "a=b"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none"},
	} {
		tr, err := startTracing(t.Context(), func(k string) string { return env[k] }, log, "nats")
		if tr != nil || err != nil {
			t.Errorf("%v: tracing %v, %v; want none", env, tr, err)
		}
	}
	for _, env := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
		{"OTEL_TRACES_EXPORTER": "zipkin"},
	} {
		if _, err := startTracing(t.Context(), func(k string) string { return env[k] }, log, "nats"); err == nil {
			t.Errorf("%v: accepted", env)
		}
	}
}

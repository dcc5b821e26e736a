package main

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver collects the spans OTLP exporters send it, over HTTP
// (protobuf) or gRPC, and the authorization header they carry.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.ResourceSpans
	auth  []string
}

func (rc *otlpReceiver) add(req *coltracepb.ExportTraceServiceRequest, auth string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.spans = append(rc.spans, req.ResourceSpans...)
	rc.auth = append(rc.auth, auth)
}

func (rc *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	rc.add(&req, r.Header.Get("Authorization"))
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (rc *otlpReceiver) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	rc.add(req, strings.Join(md.Get("authorization"), ","))
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// startReceiver serves rc over protocol and returns its endpoint.
func (rc *otlpReceiver) start(t *testing.T, protocol string) string {
	t.Helper()
	if protocol == "http/protobuf" {
		srv := httptest.NewServer(rc)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, rc)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return "http://" + l.Addr().String()
}

// TestRelayExportsSpans runs the binary with the OTEL_ variables against
// an OTLP receiver, over each protocol: the receiver gets a span per batch,
// with the service name and resource attributes of the variables, linked
// to the producer's trace, while the message carries the producer's trace
// context to the webhook; the exporter's headers never reach the log.
func TestRelayExportsSpans(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			t.Parallel()
			rc := &otlpReceiver{}
			endpoint := rc.start(t, protocol)
			var mu sync.Mutex
			var traceparent string
			hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				traceparent = r.Header.Get("Ce-Traceparent")
				mu.Unlock()
				w.WriteHeader(http.StatusNoContent)
			}))
			defer hook.Close()

			b := newSQLite(t)
			mustRun(t, "migrate", "--db", b.dsn)
			const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			tp := "00-" + traceID + "-" + parent + "-01"
			b.exec(t, "INSERT INTO outbox (msg_id, topic, payload, headers) VALUES (?, ?, ?, ?)",
				"t1", "orders", `{"n":1}`, `{"traceparent":"`+tp+`"}`)
			env := []string{"OUTBOX_DB=" + b.dsn, "OUTBOX_BROKER=" + hook.URL, "OUTBOX_INTERVAL=50ms",
				"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
				"OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20otlp-token-4711",
				"OTEL_SERVICE_NAME=orders-relay", "OTEL_RESOURCE_ATTRIBUTES=team=payments,deployment.environment.name=test",
				"OTEL_TRACES_SAMPLER=always_on"}
			stop := startRelay(t, env)
			waitFor(t, "t1 SENT", 30*time.Second, func() bool { return b.status(t, "t1") == 1 })
			r := stop() // the exporter sends the spans it holds before the relay exits
			if r.code != 0 || !strings.Contains(r.stderr, "tracing on") {
				t.Fatalf("relay: %s", r)
			}
			if strings.Contains(r.stderr, "otlp-token-4711") {
				t.Fatalf("the exporter's header is in the log:\n%s", r.stderr)
			}
			mu.Lock()
			if traceparent != tp {
				t.Errorf("the webhook got ce-traceparent %q, want %q", traceparent, tp)
			}
			mu.Unlock()

			rc.mu.Lock()
			defer rc.mu.Unlock()
			if len(rc.auth) == 0 || rc.auth[0] != "Bearer otlp-token-4711" {
				t.Errorf("authorization at the receiver: %q", rc.auth)
			}
			span, res := findSpan(rc.spans, "send orders")
			if span == nil {
				t.Fatalf("no span \"send orders\" among %d resource spans", len(rc.spans))
			}
			if got := attrs(res.GetResource().GetAttributes()); got["service.name"] != "orders-relay" || got["team"] != "payments" ||
				got["deployment.environment.name"] != "test" {
				t.Errorf("resource attributes: %v", got)
			}
			if got := attrs(span.Attributes); got["messaging.system"] != "webhook" || got["messaging.message.id"] != "t1" ||
				got["messaging.destination.name"] != "orders" {
				t.Errorf("span attributes: %v", got)
			}
			if len(span.Links) != 1 || hex.EncodeToString(span.Links[0].TraceId) != traceID || hex.EncodeToString(span.Links[0].SpanId) != parent {
				t.Errorf("links: %v, want one to %s/%s", span.Links, traceID, parent)
			}
		})
	}
}

func findSpan(all []*tracepb.ResourceSpans, name string) (*tracepb.Span, *tracepb.ResourceSpans) {
	for _, rs := range all {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				if s.Name == name {
					return s, rs
				}
			}
		}
	}
	return nil, nil
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.GetStringValue()
	}
	return m
}

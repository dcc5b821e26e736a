package relaycmd

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// otlpHTTP is an otlptrace.Client that posts spans as OTLP/HTTP protobuf.
// The SDK's otlptracehttp imports the OTLP collector package, whose gRPC
// service code links all of gRPC into the binary; this client encodes the
// export request itself and needs only the span messages.
type otlpHTTP struct {
	endpoint string
	headers  map[string]string
	gzip     bool
	client   *http.Client
}

var _ otlptrace.Client = (*otlpHTTP)(nil)

// newOTLPHTTP reads the OTEL_EXPORTER_OTLP_ variables of OTLP/HTTP: the
// endpoint (the traces one as given, else the base one with /v1/traces,
// else http://localhost:4318/v1/traces), headers, timeout (milliseconds,
// default 10000), compression (gzip or none), and the CA, client
// certificate and key files.
func newOTLPHTTP(getenv func(string) string) (*otlpHTTP, error) {
	env := func(name string) string {
		return firstEnv(getenv, "OTEL_EXPORTER_OTLP_TRACES_"+name, "OTEL_EXPORTER_OTLP_"+name)
	}
	c := &otlpHTTP{endpoint: strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")), headers: map[string]string{}}
	if c.endpoint == "" {
		base := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
		if base == "" {
			base = "http://localhost:4318"
		}
		c.endpoint = strings.TrimSuffix(base, "/") + "/v1/traces"
	}
	if u, err := url.Parse(c.endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT %s is not an http:// or https:// URL", cli.RedactDSN(c.endpoint))
	}
	for _, kv := range strings.Split(env("HEADERS"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		dk, err1 := url.QueryUnescape(strings.TrimSpace(k))
		dv, err2 := url.PathUnescape(strings.TrimSpace(v))
		if err1 != nil || err2 != nil || dk == "" {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: a header is not key=value, percent-encoded (not shown: it may hold a secret)")
		}
		c.headers[dk] = dv
	}
	timeout := 10 * time.Second
	if s := env("TIMEOUT"); s != "" {
		ms, err := strconv.Atoi(s)
		if err != nil || ms <= 0 {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_TIMEOUT=%q: give milliseconds, e.g. 10000", s)
		}
		timeout = time.Duration(ms) * time.Millisecond
	}
	switch comp := env("COMPRESSION"); comp {
	case "", "none":
	case "gzip":
		c.gzip = true
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_COMPRESSION=%q: use gzip or none", comp)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	files := dbopen.TLS{CA: env("CERTIFICATE"), Cert: env("CLIENT_CERTIFICATE"), Key: env("CLIENT_KEY")}
	if files.Set() {
		cfg, err := files.Config("OTEL_EXPORTER_OTLP")
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = cfg
	}
	c.client = &http.Client{Transport: tr, Timeout: timeout}
	return c, nil
}

func (c *otlpHTTP) Start(context.Context) error { return nil }

func (c *otlpHTTP) Stop(context.Context) error {
	c.client.CloseIdleConnections()
	return nil
}

// UploadTraces posts an ExportTraceServiceRequest: field 1, repeated
// ResourceSpans.
func (c *otlpHTTP) UploadTraces(ctx context.Context, spans []*tracepb.ResourceSpans) error {
	var body []byte
	for _, rs := range spans {
		b, err := proto.Marshal(rs)
		if err != nil {
			return err
		}
		body = protowire.AppendTag(body, 1, protowire.BytesType)
		body = protowire.AppendBytes(body, b)
	}
	if c.gzip {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(body)
		_ = zw.Close()
		body = buf.Bytes()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if c.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("OTLP export to %s: %w", cli.RedactDSN(c.endpoint), cli.UnwrapAll(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("OTLP export to %s: %s", cli.RedactDSN(c.endpoint), resp.Status)
	}
	return nil
}

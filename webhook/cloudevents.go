package webhook

import (
	"net/http"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
)

// setEventHeaders writes the CloudEvents HTTP binding (binary mode) headers of
// m into h. Every string value is percent-encoded as the binding requires, so
// any UTF-8 text in a row travels safely in an HTTP header.
func (p *Publisher) setEventHeaders(h http.Header, m *outbox.Message) {
	id := encodeValue(m.MsgID)
	h.Set("Content-Type", "application/json")
	h.Set("Ce-Specversion", "1.0")
	h.Set("Ce-Id", id)
	h.Set("Ce-Type", encodeValue(m.Topic))
	h.Set("Ce-Source", p.source)
	if !m.CreatedAt.IsZero() {
		h.Set("Ce-Time", m.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	if m.Key != "" {
		h.Set("Ce-Partitionkey", encodeValue(m.Key))
	}
	p.headers.Check(m)
	for _, ext := range cloudevents.Extensions(m.Headers) {
		h.Set("Ce-"+ext.Name, encodeValue(ext.Value))
	}
	// The idempotency key is the msg_id encoded like ce-id, so that a receiver
	// sees the same string in both. Go's transport also treats a request that
	// carries Idempotency-Key as safe to replay when a pooled connection turns
	// out to be closed before the request was written.
	h.Set("Idempotency-Key", id)
}

// encodeValue is the HTTP binding's percent-encoding of a header value.
func encodeValue(s string) string { return cloudevents.PercentEncode(s) }

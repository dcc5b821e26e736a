package webhook

import (
	"net/http"
	"sort"
	"time"

	"github.com/outbox-go/outbox"
)

// reservedAttributes are the CloudEvents context attributes the publisher sets
// from the row itself (or that the HTTP binding maps elsewhere, like
// datacontenttype to Content-Type). A row header with one of these names is
// skipped rather than allowed to contradict the row. The writer already refuses
// such names; rows inserted by other programs (sidecar mode) are not checked.
var reservedAttributes = map[string]bool{
	"id": true, "source": true, "type": true, "specversion": true, "time": true,
	"datacontenttype": true, "dataschema": true, "subject": true, "data": true,
	"partitionkey": true,
}

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
	for _, ext := range extensions(m.Headers) {
		h.Set("Ce-"+ext.name, encodeValue(ext.value))
	}
	// The idempotency key is the msg_id encoded like ce-id, so that a receiver
	// sees the same string in both. Go's transport also treats a request that
	// carries Idempotency-Key as safe to replay when a pooled connection turns
	// out to be closed before the request was written.
	h.Set("Idempotency-Key", id)
}

type extension struct{ name, value string }

// extensions turns a row's headers into CloudEvents extension attributes.
// Names are lower-cased and stripped of everything but a-z and 0-9, because
// rows written by other programs may carry names like "Trace-ID"; a name that
// ends up empty or reserved is skipped. When two names collide, the one that
// was already well-formed wins, else the first in sorted order, so the result
// never depends on map iteration order.
func extensions(headers map[string]string) []extension {
	if len(headers) == 0 {
		return nil
	}
	names := make([]string, 0, len(headers))
	for name := range headers {
		names = append(names, name)
	}
	sort.Strings(names)
	chosen := make(map[string]string, len(names))
	var order []string
	for _, orig := range names {
		n := extensionName(orig)
		if n == "" {
			continue
		}
		prev, taken := chosen[n]
		if !taken {
			order = append(order, n)
		}
		if !taken || (orig == n && prev != n) {
			chosen[n] = orig
		}
	}
	out := make([]extension, 0, len(order))
	for _, n := range order {
		out = append(out, extension{name: n, value: headers[chosen[n]]})
	}
	return out
}

// extensionName returns name as a CloudEvents attribute name (lower-case ASCII
// letters and digits), or "" when nothing usable is left or the name is one the
// publisher sets itself.
func extensionName(name string) string {
	b := make([]byte, 0, len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b = append(b, c)
		case c >= 'A' && c <= 'Z':
			b = append(b, c+('a'-'A'))
		}
	}
	if len(b) == 0 || reservedAttributes[string(b)] {
		return ""
	}
	return string(b)
}

// encodeValue percent-encodes s for an HTTP header as the CloudEvents HTTP
// binding (section 3.1.3.2) says: every byte outside printable ASCII
// (U+0021..U+007E), plus space, double quote and percent, becomes %XX with
// upper-case hex over the UTF-8 bytes. Receivers decode with url.PathUnescape.
func encodeValue(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if mustEncode(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if mustEncode(c) {
			b = append(b, '%', hex[c>>4], hex[c&0x0f])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func mustEncode(c byte) bool {
	return c <= ' ' || c >= 0x7f || c == '"' || c == '%'
}

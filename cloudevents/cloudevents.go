// Package cloudevents maps an outbox message to the attributes of a CloudEvent
// (specversion 1.0, binary content mode) and back. Every broker adapter uses it,
// so that a message carries the same attributes whatever the transport; each
// adapter only decides how a transport spells an attribute (a "ce-" header in
// HTTP, "ce_" in Kafka, a v5 user property in MQTT, a stream field in Redis).
//
// The mapping: id = msg_id, type = topic, source = configured,
// time = created_at, partitionkey = msg_key when set, each row header as an
// extension attribute, and the payload as the data, with datacontenttype
// application/json.
package cloudevents

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/outbox-go/outbox"
)

// The attribute names the mapping uses.
const (
	SpecVersion  = "specversion"
	ID           = "id"
	Source       = "source"
	Type         = "type"
	Time         = "time"
	PartitionKey = "partitionkey"
	// ContentType is the datacontenttype attribute; transports with a content
	// type of their own (HTTP, AMQP, MQTT v5) carry it there instead.
	ContentType = "datacontenttype"
)

// JSON is the datacontenttype of every message: the payload is JSON.
const JSON = "application/json"

// DefaultSource is the source attribute when none is configured.
const DefaultSource = "/outbox"

// reserved are the CloudEvents context attributes the mapping sets from the
// row itself, or that transports map elsewhere. A row header with one of these
// names is skipped rather than allowed to contradict the row. The writer
// already refuses such names; rows inserted by other programs (sidecar mode)
// are not checked.
var reserved = map[string]bool{
	SpecVersion: true, ID: true, Source: true, Type: true, Time: true,
	ContentType: true, "dataschema": true, "subject": true, "data": true,
	PartitionKey: true,
}

// RowAttributes returns the names of the attributes Attributes sets from the
// row itself (every one but the extensions), in its order; a binding can
// derive their names on the wire from it once.
func RowAttributes() []string {
	return []string{SpecVersion, ID, Source, Type, Time, PartitionKey}
}

// IsReserved reports whether name is an attribute the mapping sets itself.
func IsReserved(name string) bool { return reserved[name] }

// Attribute is one CloudEvents context attribute, by its canonical
// (lower-case) name. Values are raw text; a transport encodes them as it must.
type Attribute struct {
	Name  string
	Value string
}

// Attributes returns m's context attributes in a fixed order: specversion,
// id, source, type, then time (when m.CreatedAt is set) and partitionkey (when
// m.Key is set), then one extension per header in sorted name order.
// datacontenttype is not included: it is always JSON. source defaults to
// DefaultSource.
func Attributes(m *outbox.Message, source string) []Attribute {
	if source == "" {
		source = DefaultSource
	}
	attrs := make([]Attribute, 0, 6+len(m.Headers))
	attrs = append(attrs,
		Attribute{SpecVersion, "1.0"},
		Attribute{ID, m.MsgID},
		Attribute{Source, source},
		Attribute{Type, m.Topic},
	)
	if !m.CreatedAt.IsZero() {
		attrs = append(attrs, Attribute{Time, m.CreatedAt.UTC().Format(time.RFC3339Nano)})
	}
	if m.Key != "" {
		attrs = append(attrs, Attribute{PartitionKey, m.Key})
	}
	return append(attrs, Extensions(m.Headers)...)
}

// Extensions turns a row's headers into extension attributes. Names are
// lower-cased and stripped of everything but a-z and 0-9, because rows
// written by other programs may carry names like "Trace-ID"; a name that ends
// up empty or reserved is skipped. When two names collide, the one that was
// already well-formed wins, else the first in sorted order, so the result
// never depends on map iteration order. The Writer refuses every name this
// would change; a publisher reports the rows of other programs that have
// one with a HeaderLog, once per name.
func Extensions(headers map[string]string) []Attribute {
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
		n := ExtensionName(orig)
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
	out := make([]Attribute, 0, len(order))
	for _, n := range order {
		out = append(out, Attribute{Name: n, Value: headers[chosen[n]]})
	}
	return out
}

// ExtensionName returns name as a CloudEvents attribute name (lower-case
// ASCII letters and digits), or "" when nothing usable is left or the name is
// one the mapping sets itself.
func ExtensionName(name string) string {
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
	if len(b) == 0 || reserved[string(b)] {
		return ""
	}
	return string(b)
}

// ErrNotEvent is the error of Decode for a received message that is not an
// outbox CloudEvent: no id, no type, an unknown specversion, a bad time, or a
// body that is not JSON. A subscriber cannot apply such a message; it sends
// it to the dead-letter path at once rather than retrying it.
var ErrNotEvent = errors.New("cloudevents: not an outbox event")

// Decode rebuilds the message a subscriber hands to its handler from the
// received attributes (canonical names, decoded values) and body: MsgID from
// id, Topic from type, Key from partitionkey, CreatedAt from time, the other
// attributes except specversion, source and datacontenttype as Headers, and
// the body as Payload. The error wraps ErrNotEvent.
func Decode(attrs map[string]string, body []byte) (outbox.Message, error) {
	var m outbox.Message
	if v, ok := attrs[SpecVersion]; ok && v != "1.0" {
		return m, fmt.Errorf("%w: specversion %q, want 1.0", ErrNotEvent, v)
	}
	m.MsgID = attrs[ID]
	if m.MsgID == "" {
		return m, fmt.Errorf("%w: no id attribute (the msg_id)", ErrNotEvent)
	}
	m.Topic = attrs[Type]
	if m.Topic == "" {
		return m, fmt.Errorf("%w: message %q has no type attribute (the topic)", ErrNotEvent, m.MsgID)
	}
	if ct, ok := attrs[ContentType]; ok && ct != "" && !isJSONType(ct) {
		return m, fmt.Errorf("%w: message %q has datacontenttype %q, want %s", ErrNotEvent, m.MsgID, ct, JSON)
	}
	if !json.Valid(body) {
		return m, fmt.Errorf("%w: message %q: body is not valid JSON", ErrNotEvent, m.MsgID)
	}
	m.Payload = json.RawMessage(body)
	m.Key = attrs[PartitionKey]
	if v := attrs[Time]; v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return m, fmt.Errorf("%w: message %q: time %q is not RFC 3339", ErrNotEvent, m.MsgID, v)
		}
		m.CreatedAt = t
	}
	for name, v := range attrs {
		if reserved[name] {
			continue
		}
		if m.Headers == nil {
			m.Headers = make(map[string]string, len(attrs))
		}
		m.Headers[name] = v
	}
	return m, nil
}

func isJSONType(ct string) bool {
	// "application/json; charset=utf-8" is JSON too.
	for i := 0; i < len(ct); i++ {
		if ct[i] == ';' {
			ct = ct[:i]
			break
		}
	}
	return ct == JSON
}

// PercentEncode encodes an attribute value for a transport whose headers
// are printable ASCII, as the CloudEvents HTTP binding (section 3.1.3.2) says:
// every byte outside U+0021..U+007E, plus space, double quote and percent,
// becomes %XX with upper-case hex over the UTF-8 bytes. A value of printable
// ASCII only (ids, topics, times) comes back unchanged. PercentDecode, or
// url.PathUnescape, undoes it.
func PercentEncode(s string) string {
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

// PercentDecode undoes PercentEncode. A value that is not valid
// percent-encoding (written by a producer that does not encode) is taken as
// it is.
func PercentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	v, err := url.PathUnescape(s)
	if err != nil {
		return s
	}
	return v
}

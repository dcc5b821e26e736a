package outboxnats

import (
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
)

// Header names on the wire. The CloudEvents NATS binding (binary mode) puts
// each attribute in a header named "ce-" followed by the attribute's name,
// and datacontenttype in "content-type". NATS headers are case-sensitive;
// these are written in lower case, as the binding spells them, and read in
// any case.
const (
	headerPrefix      = "ce-"
	headerContentType = "content-type"
	// headerMsgID is JetStream's deduplication header.
	headerMsgID = "Nats-Msg-Id"
	// Headers added to a dead letter, on top of the original's.
	headerDeadReason   = "Outbox-Dead-Reason"
	headerDeadGroup    = "Outbox-Dead-Group"
	headerDeadSubject  = "Outbox-Dead-Subject"
	headerDeadSequence = "Outbox-Dead-Sequence"
)

// eventHeader returns the NATS headers of m: the CloudEvents attributes,
// content-type and Nats-Msg-Id. source is already encoded.
func eventHeader(m *outbox.Message, source string) nats.Header {
	attrs := cloudevents.Attributes(m, "")
	h := make(nats.Header, len(attrs)+2)
	// One backing array for every header's one value: the relay builds
	// these for every message it publishes.
	vals := make([]string, len(attrs)+2)
	for i, a := range attrs {
		v := encodeValue(a.Value)
		if a.Name == cloudevents.Source {
			v = source
		}
		name, ok := headerNames[a.Name]
		if !ok {
			name = headerPrefix + a.Name
		}
		vals[i] = v
		h[name] = vals[i : i+1 : i+1]
	}
	n := len(attrs)
	vals[n], vals[n+1] = cloudevents.JSON, encodeValue(m.MsgID)
	h[headerContentType] = vals[n : n+1 : n+1]
	h[headerMsgID] = vals[n+1 : n+2 : n+2]
	return h
}

// headerNames holds the header name of each attribute every message has,
// so that it is not built again for every message.
var headerNames = func() map[string]string {
	names := map[string]string{}
	for _, a := range cloudevents.RowAttributes() {
		names[a] = headerPrefix + a
	}
	return names
}()

// decodeHeader returns the CloudEvents attributes of a received message,
// by canonical name: every ce- header, and content-type as datacontenttype.
func decodeHeader(h nats.Header) map[string]string {
	attrs := make(map[string]string, len(h))
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		lk := strings.ToLower(k)
		switch {
		case strings.HasPrefix(lk, headerPrefix) && len(lk) > len(headerPrefix):
			attrs[lk[len(headerPrefix):]] = decodeValue(vs[0])
		case lk == headerContentType:
			attrs[cloudevents.ContentType] = vs[0]
		}
	}
	return attrs
}

// decodeMessage rebuilds the outbox message of a received NATS message; the
// error wraps cloudevents.ErrNotEvent.
func decodeMessage(h nats.Header, data []byte) (outbox.Message, error) {
	return cloudevents.Decode(decodeHeader(h), data)
}

// encodeValue percent-encodes s as the CloudEvents HTTP binding does for
// header values (cloudevents.PercentEncode). NATS headers cannot carry CR or
// LF, trim surrounding spaces and are ASCII by protocol, so without it a
// row's value would not come back as it left.
func encodeValue(s string) string { return cloudevents.PercentEncode(s) }

// decodeValue undoes encodeValue; a value that is not valid percent-encoding
// is taken as it is.
func decodeValue(s string) string { return cloudevents.PercentDecode(s) }

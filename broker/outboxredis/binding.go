package outboxredis

import (
	"fmt"
	"strings"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
)

// The fields of a stream entry. CloudEvents has no Redis binding; this one
// follows the Kafka binding: each context attribute is a field named "ce_"
// plus the attribute's name, the content type is "content-type", and the
// payload is "data".
const (
	// AttributePrefix starts the field name of each CloudEvents attribute.
	AttributePrefix = "ce_"
	// FieldContentType holds the datacontenttype: always application/json.
	FieldContentType = "content-type"
	// FieldData holds the payload, byte for byte.
	FieldData = "data"
)

// The fields a subscriber adds to a dead letter, beside the original ones.
const (
	// FieldDeadReason says why the message was dead-lettered: the handler's
	// last error, or why the entry is not an event.
	FieldDeadReason = "dead-reason"
	// FieldDeadStream is the stream the entry was read from.
	FieldDeadStream = "dead-stream"
	// FieldDeadID is the entry's id in that stream.
	FieldDeadID = "dead-id"
	// FieldDeadGroup is the consumer group that gave up on it.
	FieldDeadGroup = "dead-group"
	// FieldDeadDeliveries is how many times the group delivered it.
	FieldDeadDeliveries = "dead-deliveries"
)

// entryValues returns m as XADD field-value pairs, in a fixed order.
func entryValues(m *outbox.Message, source string) []any {
	attrs := cloudevents.Attributes(m, source)
	vals := make([]any, 0, 2*len(attrs)+4)
	for _, a := range attrs {
		name, ok := fieldNames[a.Name]
		if !ok {
			name = AttributePrefix + a.Name
		}
		vals = append(vals, name, a.Value)
	}
	return append(vals, FieldContentType, cloudevents.JSON, FieldData, []byte(m.Payload))
}

// fieldNames holds the field name of each attribute every message has, made
// an interface value once: appending a string to a []any copies it to the
// heap, and the relay does this for every message it publishes.
var fieldNames = func() map[string]any {
	names := map[string]any{}
	for _, a := range cloudevents.RowAttributes() {
		names[a] = AttributePrefix + a
	}
	return names
}()

// decodeEntry rebuilds the message of a stream entry. The error wraps
// cloudevents.ErrNotEvent.
func decodeEntry(values map[string]any) (outbox.Message, error) {
	attrs := make(map[string]string, len(values))
	var body []byte
	for name, v := range values {
		s, ok := v.(string)
		if !ok {
			return outbox.Message{}, fmt.Errorf("%w: field %q is a %T, not a string", cloudevents.ErrNotEvent, name, v)
		}
		switch {
		case name == FieldData:
			body = []byte(s)
		case name == FieldContentType:
			attrs[cloudevents.ContentType] = s
		case strings.HasPrefix(name, AttributePrefix):
			attrs[name[len(AttributePrefix):]] = s
		}
	}
	return cloudevents.Decode(attrs, body)
}

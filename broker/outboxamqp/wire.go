package outboxamqp

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
)

// AttributePrefix is the prefix of the CloudEvents attributes in a message's
// headers (the AMQP application properties). The CloudEvents AMQP binding
// (section 3.1.3.1) allows "cloudEvents_" and "cloudEvents:" and prefers the
// underscore, which JMS clients and message selectors accept; the publisher
// writes it, and the subscriber reads both.
const AttributePrefix = "cloudEvents_"

// altAttributePrefix is the binding's other spelling, read but not written.
const altAttributePrefix = "cloudEvents:"

// publishing builds the AMQP message for m: binary content mode, the payload
// as the body, content-type application/json, message-id msg_id, persistent.
func publishing(m *outbox.Message, source string) amqp.Publishing {
	attrs := cloudevents.Attributes(m, source)
	headers := make(amqp.Table, len(attrs))
	for _, a := range attrs {
		// Every value travels as its canonical string, which the binding
		// allows: an AMQP 0-9-1 timestamp holds whole seconds only, and
		// created_at has microseconds.
		headers[AttributePrefix+a.Name] = a.Value
	}
	p := amqp.Publishing{
		Headers:      headers,
		ContentType:  cloudevents.JSON,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.MsgID,
		Type:         m.Topic,
		Body:         m.Payload,
	}
	if !m.CreatedAt.IsZero() {
		p.Timestamp = m.CreatedAt.UTC()
	}
	return p
}

// decode rebuilds the message a delivery carries, with cloudevents.Decode.
// The error wraps cloudevents.ErrNotEvent.
func decode(d *amqp.Delivery) (outbox.Message, error) {
	attrs := make(map[string]string, len(d.Headers))
	for k, v := range d.Headers {
		var name string
		switch {
		case strings.HasPrefix(k, AttributePrefix):
			name = k[len(AttributePrefix):]
		case strings.HasPrefix(k, altAttributePrefix):
			name = k[len(altAttributePrefix):]
		default:
			continue
		}
		s, ok := attributeString(v)
		if !ok {
			return outbox.Message{}, fmt.Errorf("%w: header %q has a value of type %T", cloudevents.ErrNotEvent, k, v)
		}
		attrs[strings.ToLower(name)] = s
	}
	if d.ContentType != "" {
		attrs[cloudevents.ContentType] = d.ContentType
	}
	return cloudevents.Decode(attrs, d.Body)
}

// attributeString turns a header value into the attribute's canonical
// string, as the binding asks receivers to accept native AMQP types too.
func attributeString(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano), true
	case bool:
		return strconv.FormatBool(v), true
	case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64:
		return fmt.Sprint(v), true
	}
	return "", false
}

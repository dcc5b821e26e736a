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

// Limits of AMQP 0-9-1 that a message can break.
const (
	// maxShortString is the most bytes of a short string: message-id, type,
	// content-type, the routing key and every header name.
	maxShortString = 255
	// frameOverhead is what a frame adds to its payload: type, channel,
	// size and frame-end.
	frameOverhead = 8
)

// check returns an error satisfying outbox.IsUndeliverable when pub, the
// publishing of m to routing key, cannot travel over AMQP 0-9-1 on a
// connection whose negotiated frame_max is frameMax (0 for none): a short
// string over 255 bytes, or a content header (the properties with every
// header) larger than one frame. The client does not refuse either before
// writing, and the broker closes the connection at once.
func check(m *outbox.Message, key string, pub *amqp.Publishing, frameMax int) error {
	short := func(field, s string) error {
		if p := cloudevents.BytesProblem(s, maxShortString, "an AMQP short string"); p != "" {
			return cloudevents.Undeliverable("AMQP", m, field, p)
		}
		return nil
	}
	if err := short("msg_id (the message-id property)", pub.MessageId); err != nil {
		return err
	}
	if err := short("topic (the type property)", pub.Type); err != nil {
		return err
	}
	if err := short("routing key", key); err != nil {
		return err
	}
	for name := range pub.Headers {
		if err := short(fmt.Sprintf("header name %q", name), name); err != nil {
			return err
		}
	}
	if size := contentHeaderSize(pub); frameMax > 0 && size > frameMax-frameOverhead {
		return cloudevents.Undeliverable("AMQP", m, "content header (properties and headers)",
			fmt.Sprintf("is %d bytes, over the %d bytes a frame of this connection holds (the broker's frame_max is %d); make the headers smaller",
				size, frameMax-frameOverhead, frameMax))
	}
	return nil
}

// contentHeaderSize is the size of the payload of pub's content header
// frame as amqp091-go writes it, for the properties publishing sets.
func contentHeaderSize(pub *amqp.Publishing) int {
	n := 2 + 2 + 8 + 2 // class id, weight, body size, property flags
	shortstr := func(s string) {
		if s != "" {
			n += 1 + len(s)
		}
	}
	shortstr(pub.ContentType)
	shortstr(pub.ContentEncoding)
	shortstr(pub.CorrelationId)
	shortstr(pub.ReplyTo)
	shortstr(pub.Expiration)
	shortstr(pub.MessageId)
	shortstr(pub.Type)
	shortstr(pub.UserId)
	shortstr(pub.AppId)
	if len(pub.Headers) > 0 {
		n += 4 // the table's length
		for name, v := range pub.Headers {
			n += 1 + len(name) + 1 // name, value type
			switch v := v.(type) {
			case string:
				n += 4 + len(v)
			default:
				n += 4 + len(fmt.Sprint(v)) // publishing sets strings only
			}
		}
	}
	if pub.DeliveryMode > 0 {
		n++
	}
	if pub.Priority > 0 {
		n++
	}
	if !pub.Timestamp.IsZero() {
		n += 8
	}
	return n
}

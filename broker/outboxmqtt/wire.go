package outboxmqtt

import (
	"fmt"
	"strings"

	"github.com/eclipse/paho.golang/paho"
	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
)

// The extension attributes a dead letter carries besides the original ones.
const (
	// AttrDeadReason is the handler's (or the decoder's) error text.
	AttrDeadReason = "deadreason"
	// AttrDeadGroup is the consumer group that gave up on the message.
	AttrDeadGroup = "deadgroup"
	// AttrDeadDeliveries is how many times the group's handler saw it.
	AttrDeadDeliveries = "deaddeliveries"
	// AttrDeadTopic is the MQTT topic the message was received on.
	AttrDeadTopic = "deadtopic"
)

// destination returns the MQTT topic of a row topic.
func destination(template, topic string) string {
	return strings.ReplaceAll(template, "{topic}", topic)
}

// newPublish builds the PUBLISH of m following the CloudEvents MQTT binding,
// binary mode, MQTT 5: each attribute is a user property of the same name,
// datacontenttype is the Content Type property, and the payload is the body.
func newPublish(m *outbox.Message, topic, source string, qos byte) *paho.Publish {
	attrs := cloudevents.Attributes(m, source)
	user := make(paho.UserProperties, len(attrs))
	for i, a := range attrs {
		user[i] = paho.UserProperty{Key: a.Name, Value: a.Value}
	}
	return &paho.Publish{
		QoS:        qos,
		Topic:      topic,
		Payload:    m.Payload,
		Properties: &paho.PublishProperties{ContentType: cloudevents.JSON, User: user},
	}
}

// attributes returns the CloudEvents attributes a received PUBLISH carries:
// every user property whose name is a well-formed attribute name (lower-case
// letters and digits), and the Content Type property as datacontenttype. A
// name given twice keeps its first value.
func attributes(p *paho.Publish) map[string]string {
	attrs := map[string]string{}
	if p.Properties == nil {
		return attrs
	}
	for _, u := range p.Properties.User {
		if !attributeName(u.Key) {
			continue
		}
		if _, dup := attrs[u.Key]; !dup {
			attrs[u.Key] = u.Value
		}
	}
	if p.Properties.ContentType != "" {
		attrs[cloudevents.ContentType] = p.Properties.ContentType
	}
	return attrs
}

func attributeName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// Decode rebuilds the outbox message of a PUBLISH received from the broker,
// for consumers that read a topic with their own MQTT client (the dead-letter
// topic, say). The error wraps cloudevents.ErrNotEvent.
func Decode(p *paho.Publish) (outbox.Message, error) {
	return cloudevents.Decode(attributes(p), p.Payload)
}

// maxString is the most bytes of an MQTT UTF-8 string: its length is two
// bytes.
const maxString = 65535

// check returns an error satisfying outbox.IsUndeliverable when pub, the
// PUBLISH of m, breaks a rule of MQTT 5 that the broker answers by closing
// the connection: a topic name that is empty, has a wildcard or starts with
// "$"; a topic or user property that is not a valid MQTT UTF-8 string
// (over 65,535 bytes, control characters U+0000 to U+001F and U+007F to
// U+009F, noncharacters: Mosquitto refuses them as "Malformed UTF-8"); a
// packet over the broker's Maximum Packet Size (maxPacket, 0 for none).
func check(m *outbox.Message, pub *paho.Publish, maxPacket uint32) error {
	if reason := topicNameProblem(pub.Topic); reason != "" {
		return cloudevents.Undeliverable("MQTT", m, fmt.Sprintf("topic %q (from row topic %q)", pub.Topic, m.Topic), reason)
	}
	if reason := cloudevents.TextProblem(pub.Topic, maxString, "an MQTT string"); reason != "" {
		return cloudevents.Undeliverable("MQTT", m, fmt.Sprintf("topic %q (from row topic %q)", pub.Topic, m.Topic), reason)
	}
	if pub.Properties != nil {
		for _, u := range pub.Properties.User {
			if reason := cloudevents.TextProblem(u.Key, maxString, "an MQTT string"); reason != "" {
				return cloudevents.Undeliverable("MQTT", m, fmt.Sprintf("user property name %q", u.Key), reason)
			}
			if reason := cloudevents.TextProblem(u.Value, maxString, "an MQTT string"); reason != "" {
				return cloudevents.Undeliverable("MQTT", m, fmt.Sprintf("value of user property %q", u.Key), reason)
			}
		}
	}
	if maxPacket > 0 {
		if size := packetSize(pub); size > int64(maxPacket) {
			return cloudevents.Undeliverable("MQTT", m, "PUBLISH packet",
				fmt.Sprintf("is %d bytes, over the broker's Maximum Packet Size of %d bytes", size, maxPacket))
		}
	}
	return nil
}

package outboxmqtt

import (
	"errors"
	"fmt"
)

// ErrNoSubscribers is the error of a message the broker acknowledged with
// reason 0x10 "no matching subscribers" (and so dropped) when the publisher
// treats that as a refusal (NoSubscribers "fail", the default). It comes
// wrapped in a *PublishError.
var ErrNoSubscribers = errors.New("outboxmqtt: no subscriber matched the topic, so the broker dropped the message")

// PublishError is the refusal of one message by the broker: a PUBACK (or,
// with QoS 2, a PUBREC) whose reason code says the message was not taken.
// It spends one of the message's retries. Reach it with errors.As.
type PublishError struct {
	// MsgID is the message's msg_id.
	MsgID string
	// Topic is the MQTT topic it was published to.
	Topic string
	// ReasonCode is the MQTT 5 reason code, e.g. 0x87 (not authorized),
	// 0x95 (packet too large), 0x10 (no matching subscribers).
	ReasonCode byte
	// Reason is the broker's reason string, or the code's meaning.
	Reason string
}

func (e *PublishError) Error() string {
	hint := ""
	switch e.ReasonCode {
	case 0x10:
		hint = "; create the consumer group first (NewSubscriber makes its subscription durable), or set no_subscribers=ok to count such messages as delivered"
	case 0x87:
		hint = "; allow this client to publish to the topic in the broker's ACL"
	case 0x95:
		hint = "; the broker's message_size_limit / max_packet_size is lower than this message"
	}
	return fmt.Sprintf("outboxmqtt: broker refused message %q on topic %q: reason 0x%02X %s%s", e.MsgID, e.Topic, e.ReasonCode, e.Reason, hint)
}

// Is makes errors.Is(err, ErrNoSubscribers) true for reason 0x10.
func (e *PublishError) Is(target error) bool {
	return target == ErrNoSubscribers && e.ReasonCode == 0x10
}

// ConnectError is the broker's refusal of the connection itself (a CONNACK
// with a failure reason: bad user name or password, not authorized, client
// id rejected). Retrying does not help; the configuration must change.
type ConnectError struct {
	// URL is the broker URL, with any password hidden.
	URL string
	// ReasonCode is the CONNACK reason code, e.g. 0x86 bad user name or password.
	ReasonCode byte
	// Reason is the broker's reason string, or the code's meaning.
	Reason string
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("outboxmqtt: broker at %s refused the connection: reason 0x%02X %s; check the user, password and client id", e.URL, e.ReasonCode, e.Reason)
}

// reasonText gives the meaning of the MQTT 5 reason codes a PUBACK, PUBREC
// or CONNACK may carry.
func reasonText(code byte) string {
	switch code {
	case 0x10:
		return "no matching subscribers"
	case 0x80:
		return "unspecified error"
	case 0x81:
		return "malformed packet"
	case 0x82:
		return "protocol error"
	case 0x83:
		return "implementation specific error"
	case 0x84:
		return "unsupported protocol version"
	case 0x85:
		return "client identifier not valid"
	case 0x86:
		return "bad user name or password"
	case 0x87:
		return "not authorized"
	case 0x88:
		return "server unavailable"
	case 0x89:
		return "server busy"
	case 0x8A:
		return "banned"
	case 0x8C:
		return "bad authentication method"
	case 0x90:
		return "topic name invalid"
	case 0x91:
		return "packet identifier in use"
	case 0x95:
		return "packet too large"
	case 0x97:
		return "quota exceeded"
	case 0x99:
		return "payload format invalid"
	}
	return "unknown reason"
}

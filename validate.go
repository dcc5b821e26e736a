package outbox

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Limits of the columns, as in DESIGN §2.
const (
	MaxMsgIDLen     = 64
	MaxTopicLen     = 128
	MaxKeyLen       = 128
	MaxHeaderName   = 64
	MaxGroupLen     = 64
	DefaultMaxBytes = 1 << 20
)

// reservedHeaders are CloudEvents context attributes that the relay sets from
// the row itself; a header may not shadow them.
var reservedHeaders = map[string]bool{
	"id": true, "source": true, "type": true, "specversion": true, "time": true,
	"datacontenttype": true, "dataschema": true, "subject": true, "data": true,
	"partitionkey": true,
}

func validateMessage(i int, m *Message, maxBytes int) error {
	fail := func(field, reason string, err error) error {
		return &ValidationError{Index: i, MsgID: m.MsgID, Field: field, Reason: reason, Err: err}
	}
	if err := checkText(m.MsgID, MaxMsgIDLen, true); err != "" {
		return fail("msg_id", err, ErrInvalidMessage)
	}
	if err := checkText(m.Topic, MaxTopicLen, true); err != "" {
		return fail("topic", err, ErrInvalidMessage)
	}
	if err := checkText(m.Key, MaxKeyLen, false); err != "" {
		return fail("key", err, ErrInvalidMessage)
	}
	if len(m.Payload) == 0 {
		return fail("payload", "empty; the payload must be a JSON value", ErrInvalidMessage)
	}
	if len(m.Payload) > maxBytes {
		return fail("payload", fmt.Sprintf("%d bytes is over the limit of %d bytes; store an id and the key fields, not the whole object (or raise MaxPayloadBytes)", len(m.Payload), maxBytes), ErrPayloadTooLarge)
	}
	if !json.Valid(m.Payload) {
		return fail("payload", "not valid JSON", ErrInvalidMessage)
	}
	for name, v := range m.Headers {
		if reason := checkHeaderName(name); reason != "" {
			return fail("headers", reason, ErrInvalidMessage)
		}
		if !utf8.ValidString(v) {
			return fail("headers", fmt.Sprintf("value of %q is not valid UTF-8", name), ErrInvalidMessage)
		}
	}
	return nil
}

func checkText(s string, max int, required bool) string {
	switch {
	case s == "" && required:
		return "empty; it is required"
	case utf8.RuneCountInString(s) > max:
		return fmt.Sprintf("%d characters is over the limit of %d", utf8.RuneCountInString(s), max)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	}
	for _, r := range s {
		if r == 0 {
			return "contains a NUL character"
		}
	}
	return ""
}

// checkHeaderName enforces CloudEvents attribute naming, so that every
// transport can carry the header unchanged.
func checkHeaderName(name string) string {
	if name == "" || len(name) > MaxHeaderName {
		return fmt.Sprintf("header name %q must be 1 to %d characters", name, MaxHeaderName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return fmt.Sprintf("header name %q: use lower-case letters and digits only (CloudEvents attribute naming)", name)
		}
	}
	if reservedHeaders[name] {
		return fmt.Sprintf("header name %q is a CloudEvents attribute the relay sets itself; pick another name", name)
	}
	return ""
}

// ValidateConsumer checks a consumer group name and msg_id for the inbox.
func ValidateConsumer(group, msgID string) error {
	if err := checkText(group, MaxGroupLen, true); err != "" {
		return &ValidationError{MsgID: msgID, Field: "consumer_group", Reason: err, Err: ErrInvalidMessage}
	}
	if err := checkText(msgID, MaxMsgIDLen, true); err != "" {
		return &ValidationError{MsgID: msgID, Field: "msg_id", Reason: err, Err: ErrInvalidMessage}
	}
	return nil
}

package outbox

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits of a message, checked by Writer.Validate. Characters are Unicode
// code points; bytes are those of the UTF-8 encoding.
const (
	// MaxMsgIDLen is the most characters of a msg_id (the column's size).
	MaxMsgIDLen = 64
	// MaxTopicLen is the most characters of a topic.
	MaxTopicLen = 128
	// MaxKeyLen is the most characters of a key.
	MaxKeyLen = 128
	// MaxHeaderName is the most characters of a header name.
	MaxHeaderName = 64
	// MaxGroupLen is the most characters of a consumer group name.
	MaxGroupLen = 64
	// DefaultMaxBytes is the default of WriterConfig.MaxPayloadBytes.
	DefaultMaxBytes = 1 << 20

	// MaxShortStringBytes is the most bytes of a msg_id and of a topic: AMQP
	// 0-9-1 carries both as short strings (message-id and type, the topic
	// also in the routing key), whose length is one byte. 64 characters of
	// four bytes each would be 256.
	MaxShortStringBytes = 255
	// MaxHeadersBytes is the most bytes of all header names and values of a
	// message together. Every header travels next to the CloudEvents
	// attributes in one place with a limit: an AMQP content header frame
	// (RabbitMQ's frame_max, 131072 by default, 4096 at the protocol's
	// least), one MQTT property string each (65,535 bytes), the HTTP request
	// headers of the webhook (common servers refuse a header line over
	// 8 KiB, and Node.js all headers over 16 KiB). 8192 bytes fit them all.
	MaxHeadersBytes = 8192
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
	if reason := checkWireText(m.MsgID, MaxMsgIDLen, MaxShortStringBytes, true); reason != "" {
		return fail("msg_id", reason, ErrInvalidMessage)
	}
	if reason := checkWireText(m.Topic, MaxTopicLen, MaxShortStringBytes, true); reason != "" {
		return fail("topic", reason, ErrInvalidMessage)
	}
	if reason := checkWireText(m.Key, MaxKeyLen, 0, false); reason != "" {
		return fail("key", reason, ErrInvalidMessage)
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
	if reason := checkStorableJSON(m.Payload); reason != "" {
		return fail("payload", reason, ErrInvalidMessage)
	}
	size := 0
	for name, v := range m.Headers {
		if reason := checkHeaderName(name); reason != "" {
			return fail("headers", reason, ErrInvalidMessage)
		}
		if reason := TextProblem(v); reason != "" {
			return fail("headers", fmt.Sprintf("value of %q %s", name, reason), ErrInvalidMessage)
		}
		size += len(name) + len(v)
	}
	if size > MaxHeadersBytes {
		return fail("headers", fmt.Sprintf("%d bytes of header names and values is over the limit of %d bytes; carry large data in the payload", size, MaxHeadersBytes), ErrInvalidMessage)
	}
	return nil
}

// TextProblem says why s cannot travel as text on every transport, or
// returns "" when it can. Refused: bytes that are not UTF-8; control
// characters, U+0000 to U+001F (tab, line feed and carriage return among
// them), U+007F and U+0080 to U+009F, which MQTT brokers refuse in strings
// (Mosquitto closes the connection) and which break NATS and HTTP header
// lines; and the Unicode noncharacters U+FDD0 to U+FDEF and U+xxFFFE,
// U+xxFFFF, which MQTT brokers refuse too. The Writer checks msg_id, topic,
// key and header values with it; publishers check rows inserted by other
// programs.
func TextProblem(s string) string {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			return fmt.Sprintf("is not valid UTF-8 (byte %d)", i)
		case r < 0x20 || r >= 0x7f && r <= 0x9f:
			return fmt.Sprintf("contains the control character U+%04X at byte %d; use printable text (no tab, line break or NUL)", r, i)
		case r >= 0xfdd0 && r <= 0xfdef || r&0xfffe == 0xfffe:
			return fmt.Sprintf("contains the Unicode noncharacter U+%04X at byte %d, which MQTT brokers refuse", r, i)
		}
		i += n
	}
	return ""
}

// Limits of PostgreSQL's numeric type, which jsonb stores numbers in: digits
// before the decimal point and after it.
const (
	maxNumericIntDigits  = 131072
	maxNumericFracDigits = 16383
	maxNumericExponent   = 1<<30 - 1
)

// checkStorableJSON finds what encoding/json accepts in valid JSON and a
// database's JSON type refuses: bytes that are not UTF-8, the escape \u0000,
// an unpaired UTF-16 surrogate escape, and a number beyond PostgreSQL's
// numeric range. Caught only by the INSERT, any of these would abort the
// caller's PostgreSQL transaction. b must be valid JSON.
func checkStorableJSON(b []byte) string {
	if !utf8.Valid(b) {
		return "contains bytes that are not UTF-8; JSON text must be UTF-8"
	}
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			end, reason := checkJSONString(b, i+1)
			if reason != "" {
				return reason
			}
			i = end
		case c == '-' || c >= '0' && c <= '9':
			end, reason := checkJSONNumber(b, i)
			if reason != "" {
				return reason
			}
			i = end - 1
		}
	}
	return ""
}

// checkJSONString checks the escapes of the string whose content starts at
// b[i] and returns the index of its closing quote.
func checkJSONString(b []byte, i int) (int, string) {
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i, ""
		case '\\':
			i++
			if b[i] != 'u' {
				continue
			}
			r := hex4(b[i+1 : i+5])
			i += 4
			switch {
			case r == 0:
				return i, `contains the escape \u0000 (NUL), which the databases' JSON types refuse; leave it out, or encode binary data as base64`
			case isLowSurrogate(r):
				return i, fmt.Sprintf(`contains the escape \u%04x, the second half of a UTF-16 surrogate pair without its first half, which the databases' JSON types refuse`, r)
			case r >= 0xD800 && r <= 0xDBFF:
				paired := i+6 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' && isLowSurrogate(hex4(b[i+3:i+7]))
				if !paired {
					return i, fmt.Sprintf(`contains the escape \u%04x, the first half of a UTF-16 surrogate pair without its second half, which the databases' JSON types refuse`, r)
				}
				i += 6
			}
		}
	}
	return i, ""
}

func isLowSurrogate(r rune) bool { return r >= 0xDC00 && r <= 0xDFFF }

func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		}
	}
	return r
}

// checkJSONNumber checks the number that starts at b[i] against the range of
// PostgreSQL's numeric (MariaDB and SQLite keep JSON as text and take any
// number) and returns the index just past it. As numeric counts them: the
// digits after the decimal point are the fraction's, trailing zeros
// included, less the exponent; the digits before it are those from the
// first non-zero digit, plus the exponent.
func checkJSONNumber(b []byte, i int) (int, string) {
	start := i
	if b[i] == '-' {
		i++
	}
	firstNonZero := -1 // position of the first non-zero digit, counted over the integer and fraction digits
	digits, intDigits, fracDigits := 0, 0, 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if b[i] != '0' && firstNonZero < 0 {
			firstNonZero = digits
		}
		digits++
		intDigits++
	}
	if i < len(b) && b[i] == '.' {
		for i++; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if b[i] != '0' && firstNonZero < 0 {
				firstNonZero = digits
			}
			digits++
			fracDigits++
		}
	}
	exp := 0
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		neg := false
		if b[i] == '-' || b[i] == '+' {
			neg = b[i] == '-'
			i++
		}
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if exp < 1<<40 {
				exp = exp*10 + int(b[i]-'0')
			}
		}
		if neg {
			exp = -exp
		}
	}
	// numeric refuses an exponent past half of int32's range even on zero.
	tooBig := exp >= maxNumericExponent || firstNonZero >= 0 && intDigits-firstNonZero+exp > maxNumericIntDigits
	if tooBig || fracDigits-exp > maxNumericFracDigits {
		n := string(b[start:i])
		if len(n) > 40 {
			n = n[:37] + "..."
		}
		return i, fmt.Sprintf("the number %s is beyond what PostgreSQL's jsonb stores (%d digits before the decimal point, %d after); send it as a string", n, maxNumericIntDigits, maxNumericFracDigits)
	}
	return i, ""
}

// checkText checks a name the inbox stores: at most max characters, UTF-8,
// no NUL.
func checkText(s string, max int, required bool) string {
	switch {
	case s == "" && required:
		return "empty; it is required"
	case utf8.RuneCountInString(s) > max:
		return fmt.Sprintf("%d characters is over the limit of %d", utf8.RuneCountInString(s), max)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL character"
	}
	return ""
}

// checkWireText checks a field that travels on every transport: at most
// maxChars characters and (when maxBytes > 0) maxBytes bytes, and no
// character TextProblem refuses.
func checkWireText(s string, maxChars, maxBytes int, required bool) string {
	switch n := utf8.RuneCountInString(s); {
	case s == "" && required:
		return "empty; it is required"
	case n > maxChars:
		return fmt.Sprintf("%d characters is over the limit of %d", n, maxChars)
	case maxBytes > 0 && len(s) > maxBytes:
		return fmt.Sprintf("%d bytes in UTF-8 is over the limit of %d bytes (%d characters, some of several bytes)", len(s), maxBytes, n)
	}
	return TextProblem(s)
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

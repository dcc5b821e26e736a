package outbox

import (
	"encoding/json"
	"fmt"
	"strings"
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
	if reason := checkStorableJSON(m.Payload); reason != "" {
		return fail("payload", reason, ErrInvalidMessage)
	}
	for name, v := range m.Headers {
		if reason := checkHeaderName(name); reason != "" {
			return fail("headers", reason, ErrInvalidMessage)
		}
		if !utf8.ValidString(v) {
			return fail("headers", fmt.Sprintf("value of %q is not valid UTF-8", name), ErrInvalidMessage)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return fail("headers", fmt.Sprintf("value of %q contains a NUL character, which the databases' text and JSON types refuse", name), ErrInvalidMessage)
		}
	}
	return nil
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

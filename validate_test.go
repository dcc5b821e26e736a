package outbox

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzValidateMessage checks that validation never panics and that whatever
// it accepts fits the columns: the database is never the first to object.
func FuzzValidateMessage(f *testing.F) {
	f.Add("m-1", "order.paid", "k", `{"a":1}`, "tenant", "x")
	f.Add("", "", "", "", "", "")
	f.Add("é", "t", "", `"\ud800"`, "Bad-Name", "\xff")
	f.Add("a\tb", "t\n", "k\r", `{}`, "tenant", "eu\x00")
	f.Fuzz(func(t *testing.T, id, topic, key, payload, hname, hval string) {
		m := Message{MsgID: id, Topic: topic, Key: key, Payload: json.RawMessage(payload), Headers: map[string]string{hname: hval}}
		err := validateMessage(0, &m, 1<<10)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("error %v is not a ValidationError", err)
			}
			return
		}
		if id == "" || utf8.RuneCountInString(id) > MaxMsgIDLen || len(id) > MaxShortStringBytes || TextProblem(id) != "" ||
			topic == "" || utf8.RuneCountInString(topic) > MaxTopicLen || len(topic) > MaxShortStringBytes || TextProblem(topic) != "" ||
			utf8.RuneCountInString(key) > MaxKeyLen || TextProblem(key) != "" ||
			!json.Valid([]byte(payload)) || len(payload) > 1<<10 || checkHeaderName(hname) != "" || TextProblem(hval) != "" ||
			len(hname)+len(hval) > MaxHeadersBytes {
			t.Fatalf("accepted %+v", m)
		}
	})
}

// A database's refusal of a message that passed validation comes back as a
// ValidationError that still holds the database's error.
func TestValidationErrorWrapsTheDatabaseError(t *testing.T) {
	dbErr := errors.New("CONSTRAINT `outbox.payload` failed")
	err := error(&ValidationError{Index: -1, Field: "message", Reason: "the database refused it", Err: dbErr})
	if !errors.Is(err, ErrInvalidMessage) || !errors.Is(err, dbErr) {
		t.Fatalf("%v: Is ErrInvalidMessage %v, Is the database's error %v", err, errors.Is(err, ErrInvalidMessage), errors.Is(err, dbErr))
	}
	if got := err.Error(); got != "outbox: one of the messages: message: the database refused it" {
		t.Fatalf("Error() = %q", got)
	}
	sentinel := error(&ValidationError{Field: "payload", Reason: "too large", Err: ErrPayloadTooLarge})
	if !errors.Is(sentinel, ErrInvalidMessage) || !errors.Is(sentinel, ErrPayloadTooLarge) {
		t.Fatal("the sentinels")
	}
}

// Each rule of the transports' limits refuses a message with a
// ValidationError that names the field and says what is allowed.
func TestValidateTransportLimits(t *testing.T) {
	ok := func() Message {
		return Message{MsgID: "m-1", Topic: "order.paid", Key: "k", Payload: json.RawMessage(`{}`), Headers: map[string]string{"tenant": "eu1"}}
	}
	four := "\U0001F600" // four bytes in UTF-8
	two := "é"           // two bytes
	tests := []struct {
		name   string
		edit   func(m *Message)
		field  string
		reason string // a part of the reason
	}{
		{"msg_id of 64 four-byte characters", func(m *Message) { m.MsgID = strings.Repeat(four, 64) }, "msg_id", "256 bytes in UTF-8 is over the limit of 255 bytes"},
		{"topic of 128 two-byte characters", func(m *Message) { m.Topic = strings.Repeat(two, 128) }, "topic", "256 bytes in UTF-8 is over the limit of 255 bytes"},
		{"msg_id with a tab", func(m *Message) { m.MsgID = "a\tb" }, "msg_id", "control character U+0009"},
		{"topic with a line feed", func(m *Message) { m.Topic = "a\nb" }, "topic", "control character U+000A"},
		{"key with a carriage return", func(m *Message) { m.Key = "a\rb" }, "key", "control character U+000D"},
		{"key with NUL", func(m *Message) { m.Key = "a\x00" }, "key", "control character U+0000"},
		{"msg_id with DEL", func(m *Message) { m.MsgID = "a\x7f" }, "msg_id", "control character U+007F"},
		{"topic with a C1 control", func(m *Message) { m.Topic = "a\u0085" }, "topic", "control character U+0085"},
		{"header value with a tab", func(m *Message) { m.Headers["tenant"] = "eu\t1" }, "headers", `value of "tenant" contains the control character U+0009`},
		{"header value with CR LF", func(m *Message) { m.Headers["tenant"] = "eu1\r\nX-Evil: 1" }, "headers", "control character U+000D"},
		{"header value with a noncharacter", func(m *Message) { m.Headers["tenant"] = "\uFFFE" }, "headers", "noncharacter U+FFFE"},
		{"header value with a noncharacter of the FDD0 block", func(m *Message) { m.Headers["tenant"] = "\uFDD0" }, "headers", "noncharacter U+FDD0"},
		{"header value not UTF-8", func(m *Message) { m.Headers["tenant"] = "\xff" }, "headers", "not valid UTF-8"},
		{"headers over 8192 bytes", func(m *Message) { m.Headers["big"] = strings.Repeat("x", MaxHeadersBytes) }, "headers", "over the limit of 8192 bytes"},
		{"header name with upper case (renamed on the wire)", func(m *Message) { m.Headers["Trace-ID"] = "1" }, "headers", "lower-case letters and digits only"},
		{"header name reserved (dropped on the wire)", func(m *Message) { m.Headers["type"] = "x" }, "headers", "CloudEvents attribute the relay sets itself"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := ok()
			tt.edit(&m)
			err := validateMessage(0, &m, DefaultMaxBytes)
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("err = %v, want a ValidationError", err)
			}
			if ve.Field != tt.field || !strings.Contains(ve.Reason, tt.reason) {
				t.Fatalf("field %q reason %q, want field %q and a reason with %q", ve.Field, ve.Reason, tt.field, tt.reason)
			}
		})
	}

	// What is right at the limits passes.
	for _, edit := range []func(m *Message){
		func(m *Message) { m.MsgID = strings.Repeat(four, 63) + "€" },              // 64 characters, 255 bytes
		func(m *Message) { m.Topic = strings.Repeat(two, 127) + "x" },              // 255 bytes
		func(m *Message) { m.Key = strings.Repeat(four, MaxKeyLen) },               // 512 bytes: travels as a value
		func(m *Message) { m.Headers["tenant"] = "eu 1 \u00e9 \u2028 \U0001F600" }, // printable, non-ASCII
		func(m *Message) { m.Headers = map[string]string{"big": strings.Repeat("x", MaxHeadersBytes-3)} },
	} {
		m := ok()
		edit(&m)
		if err := validateMessage(0, &m, DefaultMaxBytes); err != nil {
			t.Errorf("%+v: %v", m, err)
		}
	}
}

func TestTextProblem(t *testing.T) {
	for _, s := range []string{"", "order-42:OrderPaid", "a b", "日本語", "\U0001F600", "\u00a0", "\uFFFD"} {
		if p := TextProblem(s); p != "" {
			t.Errorf("TextProblem(%q) = %q, want none", s, p)
		}
	}
	for _, s := range []string{"\t", "\n", "\r", "\x00", "\x1b", "\x7f", "\u0080", "\u009f", "\uFDEF", "\uFFFF", "\U0001FFFE", "\U0010FFFF", "\xc3"} {
		if p := TextProblem(s); p == "" {
			t.Errorf("TextProblem(%q) found nothing", s)
		}
	}
}

package outbox

import (
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"
)

// FuzzValidateMessage checks that validation never panics and that whatever
// it accepts fits the columns: the database is never the first to object.
func FuzzValidateMessage(f *testing.F) {
	f.Add("m-1", "order.paid", "k", `{"a":1}`, "tenant", "x")
	f.Add("", "", "", "", "", "")
	f.Add("é", "t", "", `"\ud800"`, "Bad-Name", "\xff")
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
		if id == "" || utf8.RuneCountInString(id) > MaxMsgIDLen || !utf8.ValidString(id) ||
			topic == "" || utf8.RuneCountInString(topic) > MaxTopicLen || utf8.RuneCountInString(key) > MaxKeyLen ||
			!json.Valid([]byte(payload)) || len(payload) > 1<<10 || checkHeaderName(hname) != "" || !utf8.ValidString(hval) {
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

package outboxotel

import (
	"errors"

	"github.com/outbox-go/outbox"
)

// The error.type values of this package's spans. OpenTelemetry asks for a
// small, documented set; an error none of these describes is "_OTHER".
const (
	// ErrorTypeDuplicate: Writer.Write met a msg_id already written.
	ErrorTypeDuplicate = "outbox.duplicate"
	// ErrorTypeInvalid: Writer.Write refused a message (outbox.ErrInvalidMessage).
	ErrorTypeInvalid = "outbox.invalid_message"
	// ErrorTypeUnavailable: the broker could not be reached; the relay
	// released the message untouched (outbox.ErrUnavailable).
	ErrorTypeUnavailable = "outbox.unavailable"
	// ErrorTypeHeldBack: the relay held the message back behind a failed
	// one of its key (outbox.ErrHeldBack).
	ErrorTypeHeldBack = "outbox.held_back"
	// ErrorTypePermanent: the error was marked outbox.Permanent: the
	// subscriber dead-letters the message, or the relay makes it DEAD.
	ErrorTypePermanent = "outbox.permanent"
	// ErrorTypePanic: the handler that Handler wraps panicked; the panic
	// goes on after the span has ended.
	ErrorTypePanic = "panic"
	// ErrorTypeOther: any other error.
	ErrorTypeOther = "_OTHER"
)

func errorType(err error) string {
	switch {
	case errors.Is(err, outbox.ErrDuplicate):
		return ErrorTypeDuplicate
	case errors.Is(err, outbox.ErrInvalidMessage):
		return ErrorTypeInvalid
	case errors.Is(err, outbox.ErrHeldBack):
		return ErrorTypeHeldBack
	case errors.Is(err, outbox.ErrUnavailable):
		return ErrorTypeUnavailable
	case errors.Is(err, outbox.ErrPermanent):
		return ErrorTypePermanent
	}
	return ErrorTypeOther
}

package outbox

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

var (
	// ErrDuplicate reports a msg_id that is already in the outbox table (or twice
	// in one call). The caller's transaction is still usable; nothing of the call
	// was inserted. The concrete error is a *DuplicateError.
	ErrDuplicate = errors.New("outbox: duplicate msg_id")

	// ErrInvalidMessage reports a message that fails validation; nothing was
	// written. The concrete error is a *ValidationError.
	ErrInvalidMessage = errors.New("outbox: invalid message")

	// ErrPayloadTooLarge reports a payload over the writer's size limit. It comes
	// wrapped in a *ValidationError, so errors.Is(err, ErrInvalidMessage) holds too.
	ErrPayloadTooLarge = errors.New("outbox: payload too large")

	// ErrSchemaMissing reports that the outbox tables do not exist: run
	// `outbox migrate` (or Migrate) first.
	ErrSchemaMissing = errors.New("outbox: tables missing; run `outbox migrate` first")

	// ErrNotFound reports that no message has the msg_id asked for.
	ErrNotFound = errors.New("outbox: message not found")

	// ErrUnavailable marks an error that means a service could not be
	// reached at all: the broker, for a publish error, or the consumer's own
	// database, for a Handler's error. The relay then pauses with its own
	// backoff and does not count the attempt against the message's retry
	// budget; a subscriber pauses and does not count the delivery toward its
	// dead-letter limit. Wrap with Unavailable or DatabaseUnavailable.
	ErrUnavailable = errors.New("outbox: unavailable")

	// ErrUndeliverable marks a publish error that means this message can
	// never be carried by the transport (a field over one of its size limits,
	// a character it refuses): no retry can help. The relay makes the message
	// DEAD at once, with the error in last_error. Wrap with Undeliverable.
	ErrUndeliverable = errors.New("outbox: message cannot be carried by the transport")

	// ErrHeldBack marks a message a publisher did not attempt because an
	// earlier message with the same key failed in the same batch. The relay
	// leaves it untouched (no retry spent) and does not pause.
	ErrHeldBack = errors.New("outbox: held back behind an earlier message with the same key")
)

// DuplicateError lists the msg_ids that already exist.
type DuplicateError struct {
	MsgIDs []string
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("outbox: duplicate msg_id %s: a message with this id was already written (pick a new msg_id, or treat the event as already recorded)",
		strings.Join(quoteAll(e.MsgIDs), ", "))
}

// Is makes errors.Is(err, ErrDuplicate) true.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// ValidationError says which message and field failed validation, and why.
type ValidationError struct {
	// Index is the message's position in the call (0 for a single message),
	// or -1 when the database refused a statement of several messages as a
	// whole (Field is then "message").
	Index int
	// MsgID is the message's msg_id as given (may be empty or invalid itself).
	MsgID string
	// Field is the offending field: "msg_id", "topic", "key", "payload", "headers",
	// "consumer_group", or "message" when the database refused a message that
	// passed validation (a limit of its own, such as MariaDB's 31 levels of
	// JSON nesting).
	Field string
	// Reason says what is wrong and what is allowed.
	Reason string
	// Err is the specific sentinel: ErrInvalidMessage or ErrPayloadTooLarge;
	// for Field "message", the database's own error.
	Err error
}

func (e *ValidationError) Error() string {
	id := ""
	if e.MsgID != "" && len(e.MsgID) <= 80 {
		id = fmt.Sprintf(" (msg_id %q)", e.MsgID)
	}
	if e.Index < 0 {
		return fmt.Sprintf("outbox: one of the messages: %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("outbox: message %d%s: %s: %s", e.Index, id, e.Field, e.Reason)
}

// Unwrap returns ErrInvalidMessage and Err: the specific sentinel, or the
// database's error.
func (e *ValidationError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalidMessage}
	}
	return []error{ErrInvalidMessage, e.Err}
}

// Unavailable wraps err so that IsUnavailable reports true: the broker could not
// be reached, the attempt does not count against the message. Its text is
// "broker unavailable: " and err's text.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	if IsUnavailable(err) {
		return err
	}
	return &unavailableError{what: "broker", err: err}
}

// DatabaseUnavailable wraps err so that IsUnavailable reports true: the
// database could not be reached (connection refused or reset, the server
// shutting down, a pool that cannot connect). The drivers return it from
// RunInTx and MarkConsumedTx, so that a Handler built with Inbox.Handler
// makes its subscriber pause instead of spending the message's deliveries.
// Its text is "database unavailable: " and err's text. DatabaseUnavailable(nil)
// is nil.
func DatabaseUnavailable(err error) error {
	if err == nil || IsUnavailable(err) {
		return err
	}
	return &unavailableError{what: "database", err: err}
}

type unavailableError struct {
	what string
	err  error
}

func (e *unavailableError) Error() string   { return e.what + " unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// IsUnavailable reports whether err means the broker, or the consumer's
// database, could not be reached at all.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// Undeliverable wraps err so that IsUndeliverable reports true: the
// transport can never carry this message, and the relay makes it DEAD at once
// instead of retrying it. A publisher returns it for a message it checked
// before sending (a header over the transport's size limit, a character the
// transport refuses), never for a message that reached the broker.
func Undeliverable(err error) error {
	if err == nil || IsUndeliverable(err) {
		return err
	}
	return &undeliverableError{err: err}
}

type undeliverableError struct{ err error }

func (e *undeliverableError) Error() string   { return "undeliverable: " + e.err.Error() }
func (e *undeliverableError) Unwrap() []error { return []error{ErrUndeliverable, e.err} }

// IsUndeliverable reports whether err means the transport can never carry the
// message.
func IsUndeliverable(err error) bool { return errors.Is(err, ErrUndeliverable) }

// WithRetryAfter wraps err so that RetryAfter(err) reports d: the broker or
// endpoint asked not to be sent anything for d (an HTTP Retry-After, a
// broker's throttle time). The text of err and what errors.Is and errors.As
// find in it are kept. WithRetryAfter(nil, d) is nil, and a d of 0 or less
// returns err unchanged.
func WithRetryAfter(err error, d time.Duration) error {
	if err == nil || d <= 0 {
		return err
	}
	return &retryAfterError{err: err, d: d}
}

type retryAfterError struct {
	err error
	d   time.Duration
}

func (e *retryAfterError) Error() string             { return e.err.Error() }
func (e *retryAfterError) Unwrap() error             { return e.err }
func (e *retryAfterError) RetryAfter() time.Duration { return e.d }

// RetryAfter returns how long the broker asked to be left alone, as a publish
// error carries it, or 0. It is the answer of the first error in err's tree
// (errors.As) with a method
//
//	RetryAfter() time.Duration
//
// which WithRetryAfter adds to any error; a publisher may also give its own
// error type that method. The relay reads it from an error that satisfies
// IsUnavailable: it pauses for the longer of its own pause and this, but at
// most RelayConfig.PauseMax. A refused message's retry delay is the relay's
// backoff whatever the error says.
func RetryAfter(err error) time.Duration {
	var ra interface{ RetryAfter() time.Duration }
	if err == nil || !errors.As(err, &ra) {
		return 0
	}
	return max(ra.RetryAfter(), 0)
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// ErrPermanent marks a handler error that no redelivery can cure (a payload
// the consumer cannot parse, say). A subscriber that receives it sends the
// message to its dead-letter path at once instead of redelivering it.
var ErrPermanent = errors.New("outbox: permanent failure")

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() []error {
	return []error{e.err, ErrPermanent}
}

// Permanent wraps err so that IsPermanent reports true, keeping err's text and
// what errors.Is and errors.As find in it. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil || IsPermanent(err) {
		return err
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, returned by a Handler, asks for the
// message to be dead-lettered without further deliveries.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

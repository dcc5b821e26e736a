package cloudevents

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/outbox-go/outbox"
)

// LimitError says why a transport cannot carry a message: a field over one
// of its size limits, or a character it refuses. A publisher returns it
// wrapped with outbox.Undeliverable (see Undeliverable), for that message
// alone, before sending anything of it: the relay makes the message DEAD at
// once, and the rest of the batch goes on.
type LimitError struct {
	// Transport names the protocol whose limit it is, e.g. "AMQP".
	Transport string
	// MsgID is the message's msg_id.
	MsgID string
	// Field is what breaks the limit, e.g. "msg_id", "routing key",
	// `header "tenant"`.
	Field string
	// Reason says what is wrong and what the transport allows.
	Reason string
}

func (e *LimitError) Error() string {
	id := e.MsgID
	if len(id) > 80 {
		id = id[:77] + "..."
	}
	return fmt.Sprintf("%s cannot carry message %q: %s %s", e.Transport, id, e.Field, e.Reason)
}

// Undeliverable returns a *LimitError for m, wrapped with
// outbox.Undeliverable.
func Undeliverable(transport string, m *outbox.Message, field, reason string) error {
	return outbox.Undeliverable(&LimitError{Transport: transport, MsgID: m.MsgID, Field: field, Reason: reason})
}

// BytesProblem says why s is over max bytes, or returns "" when it is not.
// what names the limit, e.g. "an AMQP short string".
func BytesProblem(s string, max int, what string) string {
	if len(s) <= max {
		return ""
	}
	return fmt.Sprintf("is %d bytes, over the %d bytes of %s", len(s), max, what)
}

// TextProblem says why s cannot travel as a string of a transport with
// MQTT's rules, or returns "" when it can: more than maxBytes bytes (when
// maxBytes > 0), or a character outbox.TextProblem refuses (bytes that are not
// UTF-8, control characters, noncharacters).
func TextProblem(s string, maxBytes int, what string) string {
	if maxBytes > 0 {
		if p := BytesProblem(s, maxBytes, what); p != "" {
			return p
		}
	}
	return outbox.TextProblem(s)
}

// HeaderLog reports the row headers that the mapping does not carry under
// their own name: Extensions renames a name that is not lower-case letters
// and digits ("Trace-ID" travels as "traceid") and drops one that is empty
// once cleaned or that the mapping sets itself ("type"). The Writer refuses
// such names; rows inserted by other programs (sidecar mode) may have them.
// It logs each name once for the life of the HeaderLog, at warning level,
// not once per message. It is safe for concurrent use.
type HeaderLog struct {
	logger    *slog.Logger
	component string
	seen      sync.Map // header name -> struct{}
}

// NewHeaderLog returns a HeaderLog that logs to logger with component as
// the message's prefix (e.g. "outboxamqp"). logger defaults to
// slog.Default().
func NewHeaderLog(logger *slog.Logger, component string) *HeaderLog {
	if logger == nil {
		logger = slog.Default()
	}
	return &HeaderLog{logger: logger, component: component}
}

// Check logs each header name of m that Extensions renames or drops, the
// first time it sees it. A message whose names are all well-formed costs no
// allocation.
func (l *HeaderLog) Check(m *outbox.Message) {
	for name := range m.Headers {
		if wellFormed(name) {
			continue
		}
		if _, logged := l.seen.LoadOrStore(name, struct{}{}); logged {
			continue
		}
		to := ExtensionName(name)
		if _, taken := m.Headers[to]; taken {
			to = "" // the well-formed name wins
		}
		if to != "" {
			l.logger.Warn(l.component+": a row header name is not a CloudEvents attribute name (lower-case letters and digits); it travels renamed. Logged once per name",
				"header", name, "sent_as", to, "msg_id", m.MsgID)
		} else {
			l.logger.Warn(l.component+": a row header is not sent: its name is one the CloudEvents mapping sets itself, has no letter or digit, or is another's once cleaned. Logged once per name",
				"header", name, "msg_id", m.MsgID)
		}
	}
}

// wellFormed reports whether Extensions carries name unchanged.
func wellFormed(name string) bool {
	if name == "" || reserved[name] {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

package webhook

import (
	"fmt"
	"net/http"
	"strings"
	"unicode"

	"github.com/outbox-go/outbox"
)

// ErrHeldBack marks a message that was not sent because an earlier message
// with the same key failed in the same Publish call. Sending it anyway would
// deliver the keyed messages out of order. It is outbox.ErrHeldBack: the relay
// leaves the message untouched, with its retry budget, and does not pause.
var ErrHeldBack = outbox.ErrHeldBack

// StatusError is the error for a response whose status is not 2xx. Statuses
// 429, 502, 503 and 504 come wrapped with outbox.Unavailable (the endpoint is
// overloaded or down and asks for a pause); any other status is a refusal of
// that message. Reach it with errors.As.
type StatusError struct {
	// URL is the endpoint, with any password redacted.
	URL string
	// StatusCode is the response's status code, e.g. 500.
	StatusCode int
	// Status is the response's status line, e.g. "500 Internal Server Error".
	Status string
	// RetryAfter is the response's Retry-After header, if any.
	RetryAfter string
	// Location is the response's Location header, set for a redirect.
	Location string
	// Body is the start of the response body (at most 256 bytes), made
	// printable, to show what the endpoint said.
	Body string
}

func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "webhook: POST %s: %s", e.URL, e.Status)
	if e.RetryAfter != "" {
		fmt.Fprintf(&b, " (Retry-After %s)", e.RetryAfter)
	}
	if e.StatusCode >= 300 && e.StatusCode < 400 {
		// A followed redirect would turn the POST into a GET on most
		// statuses and lose the body, so the default client stops here.
		fmt.Fprintf(&b, " (redirect to %q not followed; set Config.URL to the final address)", e.Location)
	}
	if e.Body != "" {
		b.WriteString(": ")
		b.WriteString(e.Body)
	}
	return b.String()
}

// unavailableStatus reports whether a status means the endpoint, or what is
// behind it, cannot take messages right now, as opposed to refusing this one.
func unavailableStatus(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// printable makes a response body fit in one line of a log or a last_error
// column: invalid UTF-8 is dropped and control characters become spaces.
func printable(b []byte) string {
	s := strings.ToValidUTF8(string(b), "")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

package webhook

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/redact"
)

// ErrHeldBack marks a message that was not sent because an earlier message
// with the same key failed in the same Publish call. Sending it anyway would
// deliver the keyed messages out of order. It is outbox.ErrHeldBack: the relay
// leaves the message untouched, with its retry budget, and does not pause.
var ErrHeldBack = outbox.ErrHeldBack

// StatusError is the error for a response whose status is not 2xx. A status
// that concerns the endpoint rather than the message (see unavailableStatus:
// a redirect, a wrong path or method, missing or expired credentials,
// overload, a server or gateway that is down) comes wrapped with
// outbox.Unavailable, so that the relay pauses without spending retries; any
// other status is a refusal of that message. Reach it with errors.As.
type StatusError struct {
	// URL is the endpoint, with its password, a token in its user name and
	// the values of secret-looking query parameters (token, key,
	// signature...) masked.
	URL string
	// StatusCode is the response's status code, e.g. 500.
	StatusCode int
	// Status is the response's status line, e.g. "500 Internal Server Error".
	Status string
	// RetryAfter is the response's Retry-After header, if any, as sent.
	RetryAfter string
	// RetryDelay is RetryAfter as a wait from the response (see
	// parseRetryAfter), 0 when there is none, it is unreadable or it lies in
	// the past. The error carries it for outbox.RetryAfter, so that the relay
	// pauses at least this long (up to RelayConfig.PauseMax) when the status
	// is one that pauses.
	RetryDelay time.Duration
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
		fmt.Fprintf(&b, " (redirect to %q not followed; set Config.URL to the final address)", redact.URL(e.Location))
	}
	if e.Body != "" {
		b.WriteString(": ")
		b.WriteString(e.Body)
	}
	return b.String()
}

// unavailableStatus reports whether a status means the endpoint, or what is
// behind it, cannot take messages right now, as opposed to refusing this one.
//
// The test is whether every message would get the same answer. Such a status
// must pause the relay: taken for a refusal, it would spend the retries of
// every message in turn and park them all as DEAD within minutes, when the
// fix (the URL, a token, a proxy, the receiver's capacity) lies with a
// person. A status that one message gets and the next does not must spend
// that message's retries instead: taken for unavailability, a poison message
// would pause the relay every time it came up and never leave.
//
// Unavailable, because they answer for the URL, the connection or the
// credentials, which are the same for every message:
//   - every 1xx and 3xx (the default client follows no redirect: Config.URL
//     must be the final address, and an http URL that redirects to https is
//     a configuration to fix);
//   - 401, 403 and 407 (credentials, set once in Config.Header or the
//     client), 404, 405, 410 and 414 (the URL or method; 410 also ends a
//     subscription in several webhook conventions: a person decides), 406,
//     411, 426 and 428 (request rules the publisher meets the same way for
//     every message), 408 and 425 (the server gave up on the connection),
//     421 (the connection reached the wrong server) and 429 (too many
//     requests);
//   - every 5xx except 500: 501 and 505 (the endpoint cannot take a POST of
//     this kind at all), 502, 503, 504 and the proxies' and CDNs' 52x (what
//     stands behind the endpoint is down or slow), 506, 507, 508, 510 and 511
//     (server configuration or storage).
//
// Refusals, because they answer for this request's body or headers: 400,
// 409, 413, 415 (the Content-Type is the same for every message, so a 415
// can only come from what the receiver found in this one), 422, 431 (a
// message's own headers can make the header block too large) and every
// other 4xx. 500 too: it is what a receiver's framework answers when its
// handler fails, and the handler may fail on this message (a payload it
// cannot digest). A receiver that is down as a whole says 503, and its
// proxy 502 or 504; a receiver whose database is down should say 503 too.
func unavailableStatus(code int) bool {
	switch {
	case code < 200, code >= 300 && code < 400:
		return true
	case code >= 500:
		return code != http.StatusInternalServerError
	}
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
		http.StatusMethodNotAllowed, http.StatusNotAcceptable, http.StatusProxyAuthRequired,
		http.StatusRequestTimeout, http.StatusGone, http.StatusLengthRequired,
		http.StatusRequestURITooLong, http.StatusMisdirectedRequest, http.StatusTooEarly,
		http.StatusUpgradeRequired, http.StatusPreconditionRequired, http.StatusTooManyRequests:
		return true
	}
	return false
}

// parseRetryAfter reads a Retry-After header (RFC 9110 §10.2.3) as a wait
// from now: delta-seconds ("120"), or an HTTP-date in any of the three forms
// http.ParseTime knows. A date is measured from the response's own Date
// header when it has a valid one, so that a clock difference between the
// relay and the endpoint does not lengthen or shorten the wait; otherwise
// from now. Anything else, and a date in the past, is 0: the header is
// advice, and an unreadable one leaves the relay's own pause in force. A
// number of seconds too large for a time.Duration is the largest one; the
// relay caps it anyway.
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if strings.Trim(v, "0123456789") == "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > math.MaxInt64/uint64(time.Second) {
			return math.MaxInt64
		}
		return time.Duration(n) * time.Second
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		now = date
	}
	return max(at.Sub(now), 0)
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

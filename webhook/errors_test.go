package webhook

import (
	"math"
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC)
	const date = "Sun, 06 Nov 1994 08:49:37 GMT" // now, as a Date header
	for _, tc := range []struct {
		retryAfter, date string
		want             time.Duration
	}{
		{"", "", 0},
		{"120", "", 120 * time.Second},
		{" 7 ", "", 7 * time.Second},
		{"0", "", 0},
		{"-5", "", 0},
		{"1.5", "", 0},
		{"soon", "", 0},
		{"99999999999999999999", "", math.MaxInt64},
		{"9223372037", "", math.MaxInt64}, // one second more than a Duration holds
		// The three HTTP-date forms, measured from now.
		{"Sun, 06 Nov 1994 08:51:37 GMT", "", 2 * time.Minute},
		{"Sunday, 06-Nov-94 08:51:37 GMT", "", 2 * time.Minute},
		{"Sun Nov  6 08:51:37 1994", "", 2 * time.Minute},
		{"Sun, 06 Nov 1994 08:49:00 GMT", "", 0}, // in the past
		// Measured from the response's Date, whatever the relay's clock says.
		{"Sun, 06 Nov 1994 09:00:00 GMT", "Sun, 06 Nov 1994 08:59:30 GMT", 30 * time.Second},
		{"Sun, 06 Nov 1994 08:51:37 GMT", date, 2 * time.Minute},
		{"Sun, 06 Nov 1994 08:51:37 GMT", "not a date", 2 * time.Minute},
	} {
		h := http.Header{}
		if tc.retryAfter != "" {
			h.Set("Retry-After", tc.retryAfter)
		}
		if tc.date != "" {
			h.Set("Date", tc.date)
		}
		if got := parseRetryAfter(h, now); got != tc.want {
			t.Errorf("Retry-After %q, Date %q: %s, want %s", tc.retryAfter, tc.date, got, tc.want)
		}
	}
}

// FuzzParseRetryAfter checks that no header makes a negative wait or a panic.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "120", "-1", "Sun, 06 Nov 1994 08:49:37 GMT", "99999999999999999999999", "0x10"} {
		f.Add(s, "Sun, 06 Nov 1994 08:49:37 GMT")
	}
	f.Fuzz(func(t *testing.T, retryAfter, date string) {
		h := http.Header{"Retry-After": {retryAfter}, "Date": {date}}
		if d := parseRetryAfter(h, time.Now()); d < 0 {
			t.Fatalf("Retry-After %q, Date %q: %s", retryAfter, date, d)
		}
	})
}

// Package redelivery is the subscribers' policy for a message whose handler
// failed: when to hand it to the handler again, when to give up and move it
// to the dead-letter path, and how to pause while the handler reports an
// outage (outbox.IsUnavailable).
package redelivery

import (
	"fmt"
	"time"

	"github.com/outbox-go/outbox"
)

// Defaults of the subscribers' redelivery fields.
const (
	DefaultDelay           = time.Second
	DefaultDelayMax        = time.Minute
	DefaultDeadLetterAfter = 10 * time.Minute
)

// Policy is when a failed message is delivered again and when it is
// dead-lettered. The n-th failed delivery waits Delay·2^(n-1), at most
// DelayMax, before the next one. A failed delivery moves the message to the
// dead-letter path when it is at least the MaxDeliveries-th and the message
// has been failing for at least DeadLetterAfter; a negative DeadLetterAfter
// asks for no least span.
type Policy struct {
	MaxDeliveries   int
	Delay           time.Duration
	DelayMax        time.Duration
	DeadLetterAfter time.Duration
}

// Defaults returns p with its zero durations set to the defaults.
func (p Policy) Defaults() Policy {
	if p.Delay == 0 {
		p.Delay = DefaultDelay
	}
	if p.DelayMax == 0 {
		p.DelayMax = max(DefaultDelayMax, p.Delay)
	}
	if p.DeadLetterAfter == 0 {
		p.DeadLetterAfter = DefaultDeadLetterAfter
	}
	return p
}

// Check says what is wrong with the durations of p after Defaults (a
// negative DeadLetterAfter is allowed: no least span), naming
// the fields as names gives them (the config field and its URL parameter),
// or returns "".
func (p Policy) Check(delay, delayMax string) string {
	switch {
	case p.Delay < 0:
		return fmt.Sprintf("%s is %s; it must be positive (or 0 for %s)", delay, p.Delay, DefaultDelay)
	case p.DelayMax < 0:
		return fmt.Sprintf("%s is %s; it must be positive (or 0 for %s)", delayMax, p.DelayMax, DefaultDelayMax)
	case p.DelayMax < p.Delay:
		return fmt.Sprintf("%s (%s) is less than %s (%s); the delay only grows", delayMax, p.DelayMax, delay, p.Delay)
	}
	return ""
}

// Backoff returns the wait after the n-th failed delivery (n >= 1):
// Delay·2^(n-1), at most DelayMax.
func (p Policy) Backoff(n int) time.Duration {
	d := p.Delay
	for i := 1; i < n && d < p.DelayMax; i++ {
		d *= 2
	}
	return min(d, p.DelayMax)
}

// Span returns the least time from the first of n deliveries to the n-th
// when each waited Backoff after the one before: the sum of Backoff(1) to
// Backoff(n-1).
func (p Policy) Span(n int) time.Duration {
	var s time.Duration
	for i := 1; i < n; i++ {
		d := p.Backoff(i)
		if d == p.DelayMax {
			// Past the cap every step adds DelayMax.
			return s + time.Duration(n-i)*d
		}
		s += d
	}
	return s
}

// Exhausted reports whether the failed delivery numbered deliveries, of a
// message failing for failingFor, sends the message to the dead-letter path.
func (p Policy) Exhausted(deliveries int, failingFor time.Duration) bool {
	return deliveries >= p.MaxDeliveries && failingFor >= p.DeadLetterAfter
}

// Outcome is how Deliver left a message.
type Outcome int

const (
	// Handled: the handler returned nil; ack the message.
	Handled Outcome = iota
	// DeadLetter: move the message to the dead-letter path.
	DeadLetter
	// Stopped: wait returned false between deliveries; leave the message to
	// the broker.
	Stopped
)

// Result is what Deliver did.
type Result struct {
	Outcome Outcome
	// Err is the handler's last error (nil after Handled).
	Err error
	// Deliveries is the count of deliveries toward MaxDeliveries, prior ones
	// included; the deliveries that failed with an outage are not counted.
	Deliveries int
}

// Retry describes one wait of Deliver, for a log line.
type Retry struct {
	Err         error
	Deliveries  int           // counted so far
	Wait        time.Duration // before the next call
	Unavailable bool          // an outage: not counted
}

// Deliver calls handle until it succeeds, fails with outbox.Permanent, or
// fails for good under p, and holds the message meanwhile. prior is the
// count of deliveries of the message before this one (the broker's count).
//
// After a failure Deliver calls wait with the pause before the next call;
// wait returns false to stop (Deliver then returns Stopped). A failure that
// satisfies outbox.IsUnavailable is an outage: it pauses with the same
// growing waits but is not counted toward MaxDeliveries. Time is measured
// from the first counted failure in this call. onRetry, if not nil, hears
// of each wait.
func (p Policy) Deliver(prior int, handle func() error, wait func(time.Duration) bool, onRetry func(Retry)) Result {
	deliveries := prior
	var first time.Time
	outages := 0
	failures := 0
	for {
		err := handle()
		if err == nil {
			return Result{Outcome: Handled, Deliveries: deliveries + 1}
		}
		if outbox.IsPermanent(err) {
			return Result{Outcome: DeadLetter, Err: err, Deliveries: deliveries + 1}
		}
		var d time.Duration
		r := Retry{Err: err}
		if outbox.IsUnavailable(err) {
			outages++
			d = p.Backoff(outages)
			r.Unavailable = true
		} else {
			outages = 0
			deliveries++
			failures++
			if first.IsZero() {
				first = time.Now()
			}
			if p.Exhausted(deliveries, time.Since(first)) {
				return Result{Outcome: DeadLetter, Err: err, Deliveries: deliveries}
			}
			d = p.Backoff(failures)
		}
		r.Deliveries, r.Wait = deliveries, d
		if onRetry != nil {
			onRetry(r)
		}
		if !wait(d) {
			return Result{Outcome: Stopped, Err: err, Deliveries: deliveries}
		}
	}
}

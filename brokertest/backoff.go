package brokertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

// BackoffEnv builds the adapter under test for RunBackoff.
type BackoffEnv struct {
	// Setup returns a Bundle on a destination no other test uses, as for
	// Env.Setup. Its Publisher, Topic and DeadLetters are used.
	Setup func(t *testing.T) *Bundle
	// NewSubscriber returns a subscriber of b's destination built with
	// opts. When it returns, the group's subscription exists.
	NewSubscriber func(t *testing.T, b *Bundle, opts BackoffOptions) Subscriber
	// Timeout bounds each wait. Defaults to 30s.
	Timeout time.Duration
}

// BackoffOptions are the redelivery settings of a subscriber, named as the
// fields of every adapter's SubscriberConfig.
type BackoffOptions struct {
	Group              string
	MaxDeliveries      int
	RedeliveryDelay    time.Duration
	RedeliveryDelayMax time.Duration
	DeadLetterAfter    time.Duration
}

// backoff is the wait after the n-th failed delivery under o.
func (o BackoffOptions) backoff(n int) time.Duration {
	d := o.RedeliveryDelay
	for i := 1; i < n && d < o.RedeliveryDelayMax; i++ {
		d *= 2
	}
	return min(d, o.RedeliveryDelayMax)
}

// RunBackoff checks a subscriber's redelivery policy: a failing message
// comes back after a growing delay and is not dead-lettered before it has
// failed MaxDeliveries times and for DeadLetterAfter; outbox.Permanent still
// dead-letters at once; and an error that satisfies outbox.IsUnavailable
// pauses the subscriber without counting toward MaxDeliveries.
func RunBackoff(t *testing.T, env BackoffEnv) {
	if env.Timeout == 0 {
		env.Timeout = 30 * time.Second
	}
	s := &backoffSuite{env: env}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"TransientFailureOutlastsMaxDeliveries", s.testTransient},
		{"DeadLetterAfterSpan", s.testDeadLetterAfter},
		{"PermanentAtOnce", s.testPermanent},
		{"OutageNotCounted", s.testOutage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type backoffSuite struct {
	env BackoffEnv
}

func (s *backoffSuite) suite() *suite {
	return &suite{env: Env{Timeout: s.env.Timeout}}
}

// clock records when each delivery of each message began.
type clock struct {
	mu    sync.Mutex
	times map[string][]time.Time
}

func (c *clock) record(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.times == nil {
		c.times = map[string][]time.Time{}
	}
	c.times[id] = append(c.times[id], time.Now())
}

func (c *clock) of(id string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.times[id]...)
}

// checkGaps checks that the delivery after the n-th is at least
// o.backoff(n) later, for the first count deliveries.
func checkGaps(t *testing.T, o BackoffOptions, times []time.Time, count int) {
	t.Helper()
	// A broker's timers may fire a little early; a millisecond is well
	// below every delay the tests use.
	const slack = time.Millisecond
	for n := 1; n < count && n < len(times); n++ {
		gap, want := times[n].Sub(times[n-1]), o.backoff(n)
		if gap < want-slack {
			t.Errorf("delivery %d came %s after delivery %d, want at least %s", n+1, gap, n, want)
		}
	}
}

// noDeadLetters checks that the group's dead-letter path is empty.
func (s *backoffSuite) noDeadLetters(t *testing.T, b *Bundle, group string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dead, err := b.DeadLetters(ctx, group)
	if err != nil {
		t.Fatalf("DeadLetters: %v", err)
	}
	for _, m := range dead {
		t.Errorf("message %s was dead-lettered", m.MsgID)
	}
}

// testTransient: a handler that fails for longer than MaxDeliveries
// deliveries take, but less than DeadLetterAfter, gets its message back
// with growing delays and then succeeds; nothing is dead-lettered.
func (s *backoffSuite) testTransient(t *testing.T) {
	o := BackoffOptions{Group: "transient", MaxDeliveries: 3, RedeliveryDelay: 100 * time.Millisecond,
		RedeliveryDelayMax: 400 * time.Millisecond, DeadLetterAfter: 4 * time.Second}
	const failFor = 1500 * time.Millisecond
	b := s.env.Setup(t)
	su := s.suite()
	rec := newRecorder()
	var clk clock
	msgs := messages(b.Topic, "tr", 4, 4)
	flaky := msgs[0].MsgID
	var first time.Time
	rec.fail = func(m outbox.Message, attempt int) error {
		clk.record(m.MsgID)
		if m.MsgID != flaky {
			return nil
		}
		if attempt == 1 {
			first = time.Now()
		}
		if time.Since(first) < failFor {
			return fmt.Errorf("database briefly gone, attempt %d", attempt)
		}
		return nil
	}
	sub := s.env.NewSubscriber(t, b, o)
	su.run(t, sub, rec.handler())
	su.publish(t, b.Publisher, msgs)
	rec.waitSucceeded(t, s.env.Timeout, msgs)
	times := clk.of(flaky)
	// 0, 0.1, 0.3, 0.7, 1.1, 1.5s: five failed deliveries (four on a slow
	// machine), more than MaxDeliveries, and the one that succeeds.
	if len(times) < 5 {
		t.Errorf("%s delivered %d times in %s of failures, want at least 5", flaky, len(times), failFor)
	}
	checkGaps(t, o, times, len(times))
	s.noDeadLetters(t, b, o.Group)
}

// testDeadLetterAfter: a message that always fails goes to the dead-letter
// path, but not before it has failed for DeadLetterAfter and MaxDeliveries
// times; its neighbours are handled.
func (s *backoffSuite) testDeadLetterAfter(t *testing.T) {
	o := BackoffOptions{Group: "span", MaxDeliveries: 2, RedeliveryDelay: 50 * time.Millisecond,
		RedeliveryDelayMax: 200 * time.Millisecond, DeadLetterAfter: 1500 * time.Millisecond}
	b := s.env.Setup(t)
	su := s.suite()
	rec := newRecorder()
	var clk clock
	msgs := messages(b.Topic, "sp", 5, 0)
	poison := msgs[2].MsgID
	rec.fail = func(m outbox.Message, attempt int) error {
		clk.record(m.MsgID)
		if m.MsgID == poison {
			return fmt.Errorf("poison, attempt %d", attempt)
		}
		return nil
	}
	sub := s.env.NewSubscriber(t, b, o)
	su.run(t, sub, rec.handler())
	su.publish(t, b.Publisher, msgs)
	su.waitDeadLetters(t, b, o.Group, []string{poison})
	times := clk.of(poison)
	if len(times) < o.MaxDeliveries {
		t.Fatalf("poison message delivered %d times, want at least MaxDeliveries = %d", len(times), o.MaxDeliveries)
	}
	if span := times[len(times)-1].Sub(times[0]); span < o.DeadLetterAfter {
		t.Errorf("poison message dead-lettered after failing for %s, want at least DeadLetterAfter = %s", span, o.DeadLetterAfter)
	}
	checkGaps(t, o, times, len(times))
	// 0, 50ms, 150ms, 350ms, 550ms, ...: about ten deliveries in 1.5s.
	if len(times) < 6 {
		t.Errorf("poison message delivered %d times in %s, want at least 6", len(times), o.DeadLetterAfter)
	}
	good := append(msgs[:2:2], msgs[3:]...)
	rec.waitSucceeded(t, s.env.Timeout, good)
}

// testPermanent: outbox.Permanent dead-letters at once, whatever
// DeadLetterAfter says.
func (s *backoffSuite) testPermanent(t *testing.T) {
	o := BackoffOptions{Group: "permanent", MaxDeliveries: 5, RedeliveryDelay: time.Second,
		RedeliveryDelayMax: time.Minute, DeadLetterAfter: time.Hour}
	b := s.env.Setup(t)
	su := s.suite()
	rec := newRecorder()
	msgs := messages(b.Topic, "pm", 3, 0)
	bad := msgs[1].MsgID
	rec.fail = func(m outbox.Message, _ int) error {
		if m.MsgID == bad {
			return outbox.Permanent(errors.New("cannot parse"))
		}
		return nil
	}
	sub := s.env.NewSubscriber(t, b, o)
	su.run(t, sub, rec.handler())
	start := time.Now()
	su.publish(t, b.Publisher, msgs)
	su.waitDeadLetters(t, b, o.Group, []string{bad})
	if el := time.Since(start); el > 15*time.Second {
		t.Errorf("the Permanent failure took %s to reach the dead-letter path", el)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got := rec.deliveries[bad]; got != 1 {
		t.Errorf("message with a Permanent failure delivered %d times, want 1", got)
	}
}

// testOutage: a handler that reports its database unreachable
// (outbox.IsUnavailable) for much longer than MaxDeliveries deliveries take
// makes the subscriber pause and retry the same message: the message is not
// dead-lettered, the message behind it (same key) waits, and once the
// outage ends the message is handled.
func (s *backoffSuite) testOutage(t *testing.T) {
	o := BackoffOptions{Group: "outage", MaxDeliveries: 2, RedeliveryDelay: 50 * time.Millisecond,
		RedeliveryDelayMax: 200 * time.Millisecond, DeadLetterAfter: time.Millisecond}
	const outage = 2 * time.Second
	b := s.env.Setup(t)
	su := s.suite()
	rec := newRecorder()
	var clk clock
	msgs := messages(b.Topic, "out", 2, 1)
	head, next := msgs[0].MsgID, msgs[1].MsgID
	var first time.Time
	var headDone, nextFirst time.Time
	rec.fail = func(m outbox.Message, attempt int) error {
		clk.record(m.MsgID)
		switch {
		case m.MsgID == next:
			if nextFirst.IsZero() {
				nextFirst = time.Now()
			}
			return nil
		case attempt == 1:
			first = time.Now()
		}
		if time.Since(first) < outage {
			return outbox.DatabaseUnavailable(fmt.Errorf("dial tcp 127.0.0.1:5432: connect: connection refused (attempt %d)", attempt))
		}
		if headDone.IsZero() {
			headDone = time.Now()
		}
		return nil
	}
	sub := s.env.NewSubscriber(t, b, o)
	su.run(t, sub, rec.handler())
	su.publish(t, b.Publisher, msgs)
	rec.waitSucceeded(t, s.env.Timeout, msgs)
	times := clk.of(head)
	// 0, 50, 150, 350, 550, ... ms: about a dozen deliveries in 2s, many
	// more than MaxDeliveries.
	if len(times) < 6 {
		t.Errorf("%s delivered %d times during a %s outage, want at least 6", head, len(times), outage)
	}
	checkGaps(t, o, times, len(times))
	rec.mu.Lock()
	if nextFirst.Before(headDone) {
		t.Errorf("%s was handled %s before the message ahead of it got through: the subscriber did not pause", next, headDone.Sub(nextFirst))
	}
	rec.mu.Unlock()
	s.noDeadLetters(t, b, o.Group)
}

package redelivery

import (
	"errors"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

func TestBackoffAndSpan(t *testing.T) {
	p := Policy{MaxDeliveries: 5}.Defaults()
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute}
	for i, w := range want {
		if got := p.Backoff(i + 1); got != w {
			t.Errorf("Backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
	var sum time.Duration
	for n := 1; n <= 40; n++ {
		if got := p.Span(n); got != sum {
			t.Fatalf("Span(%d) = %s, want %s", n, got, sum)
		}
		sum += p.Backoff(n)
	}
	// The defaults survive a five-minute outage: the delivery at which the
	// message has failed for ten minutes is the 16th, 603s after the first.
	n := 1
	for !p.Exhausted(n, p.Span(n)) {
		n++
	}
	if n != 16 || p.Span(n) != 603*time.Second {
		t.Errorf("dead-lettered at delivery %d after %s, want 16 after 603s", n, p.Span(n))
	}
}

func TestCheck(t *testing.T) {
	for _, p := range []Policy{
		{Delay: -1}, {DelayMax: -1},
		{Delay: 2 * time.Second, DelayMax: time.Second},
	} {
		if p.Defaults().Check("A", "B") == "" {
			t.Errorf("%+v passed Check", p)
		}
	}
	if r := (Policy{}).Defaults().Check("A", "B"); r != "" {
		t.Errorf("defaults: %s", r)
	}
	if p := (Policy{MaxDeliveries: 1, DeadLetterAfter: -1}).Defaults(); !p.Exhausted(1, 0) || p.Check("A", "B") != "" {
		t.Errorf("a negative DeadLetterAfter: %+v", p)
	}
	if p := (Policy{Delay: 2 * time.Minute}).Defaults(); p.DelayMax != 2*time.Minute {
		t.Errorf("DelayMax defaults to %s under a Delay of 2m", p.DelayMax)
	}
}

func TestDeliver(t *testing.T) {
	p := Policy{MaxDeliveries: 3, Delay: time.Millisecond, DelayMax: 4 * time.Millisecond, DeadLetterAfter: 30 * time.Millisecond}
	transient := errors.New("transient")
	var waits []time.Duration
	wait := func(d time.Duration) bool { waits = append(waits, d); time.Sleep(d); return true }

	t.Run("dead-letters after MaxDeliveries and DeadLetterAfter", func(t *testing.T) {
		waits = nil
		start := time.Now()
		r := p.Deliver(0, func() error { return transient }, wait, nil)
		if r.Outcome != DeadLetter || !errors.Is(r.Err, transient) {
			t.Fatalf("got %+v", r)
		}
		if el := time.Since(start); el < p.DeadLetterAfter {
			t.Errorf("dead-lettered after %s, before DeadLetterAfter", el)
		}
		if r.Deliveries < 3 || r.Deliveries != len(waits)+1 {
			t.Errorf("%d deliveries, %d waits", r.Deliveries, len(waits))
		}
		for i, w := range waits {
			if w != p.Backoff(i+1) {
				t.Errorf("wait %d is %s, want %s", i+1, w, p.Backoff(i+1))
			}
		}
	})
	t.Run("permanent at once", func(t *testing.T) {
		calls := 0
		r := p.Deliver(2, func() error { calls++; return outbox.Permanent(transient) }, wait, nil)
		if r.Outcome != DeadLetter || calls != 1 || r.Deliveries != 3 {
			t.Fatalf("got %+v after %d calls", r, calls)
		}
	})
	t.Run("outage not counted", func(t *testing.T) {
		calls := 0
		var retries []Retry
		r := p.Deliver(0, func() error {
			calls++
			if calls <= 20 {
				return outbox.Unavailable(transient)
			}
			return nil
		}, func(time.Duration) bool { return true }, func(r Retry) { retries = append(retries, r) })
		if r.Outcome != Handled || r.Deliveries != 1 || calls != 21 {
			t.Fatalf("got %+v after %d calls", r, calls)
		}
		for _, rt := range retries {
			if !rt.Unavailable || rt.Deliveries != 0 {
				t.Fatalf("retry %+v", rt)
			}
		}
		if retries[19].Wait != p.DelayMax {
			t.Errorf("20th pause %s, want DelayMax", retries[19].Wait)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		r := p.Deliver(0, func() error { return transient }, func(time.Duration) bool { return false }, nil)
		if r.Outcome != Stopped || r.Deliveries != 1 {
			t.Fatalf("got %+v", r)
		}
	})
}

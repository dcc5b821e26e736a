package outbox

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

// deleteStore counts DeleteSent calls and answers from a script; the
// drivertest suite's Cleaner runs the cleaner against every real database.
type deleteStore struct {
	outboxdriver.Store // nil: any other call panics
	mu                 sync.Mutex
	calls              int
	left               int64 // rows old enough
	inbox              int64 // inbox records old enough
	fail               error
	took               time.Duration // how long each DeleteSent takes
}

func (s *deleteStore) DeleteConsumed(_ context.Context, olderThan time.Duration, limit int) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.fail != nil {
		return 0, s.fail
	}
	n := min(s.inbox, int64(limit))
	s.inbox -= n
	return n, nil
}

func (s *deleteStore) Tables() Tables { return Tables{}.WithDefaults() }

func (s *deleteStore) DeleteSent(_ context.Context, olderThan time.Duration, limit int) (int64, error) {
	time.Sleep(s.took)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.fail != nil {
		return 0, s.fail
	}
	n := min(s.left, int64(limit))
	s.left -= n
	return n, nil
}

func TestNewCleanerConfig(t *testing.T) {
	st := &deleteStore{}
	for _, c := range []struct {
		cfg  CleanerConfig
		want string
	}{
		{CleanerConfig{}, "InboxOlderThan"},
		{CleanerConfig{OlderThan: -time.Hour}, "negative"},
		{CleanerConfig{InboxOlderThan: -time.Hour}, "negative"},
		{CleanerConfig{OlderThan: time.Hour, Interval: -1}, "Interval"},
		{CleanerConfig{OlderThan: time.Hour, BatchSize: -1}, "BatchSize"},
		{CleanerConfig{OlderThan: time.Hour, BatchSize: 100001}, "BatchSize"},
		{CleanerConfig{OlderThan: time.Hour, MaxBatches: -1}, "MaxBatches"},
		{CleanerConfig{OlderThan: time.Hour, DutyCycle: -0.5}, "DutyCycle"},
		{CleanerConfig{OlderThan: time.Hour, DutyCycle: 1.5}, "DutyCycle"},
		{CleanerConfig{OlderThan: time.Hour, DutyCycle: math.NaN()}, "DutyCycle"},
	} {
		if _, err := NewCleaner(st, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error about %s", c.cfg, err, c.want)
		}
	}
	if _, err := NewCleaner(nil, CleanerConfig{OlderThan: time.Hour}); err == nil {
		t.Error("a nil store was taken")
	}
	c, err := NewCleaner(st, CleanerConfig{OlderThan: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Config(); got.Interval != 10*time.Minute || got.BatchSize != 1000 || got.MaxBatches != 0 || got.DutyCycle != 1 || got.Logger == nil {
		t.Fatalf("defaults: %+v", got)
	}
}

func TestCleanerRounds(t *testing.T) {
	st := &deleteStore{left: 2500}
	c, err := NewCleaner(st, CleanerConfig{OlderThan: time.Hour, BatchSize: 1000, MaxBatches: 2})
	if err != nil {
		t.Fatal(err)
	}
	// MaxBatches bounds a round; a batch that is not full ends it.
	if rep, err := c.RunOnce(context.Background()); rep != (CleanerReport{Sent: 2000}) || err != nil || st.calls != 2 {
		t.Fatalf("first round: %+v, %v after %d calls", rep, err, st.calls)
	}
	if rep, err := c.RunOnce(context.Background()); rep != (CleanerReport{Sent: 500}) || err != nil || st.calls != 3 {
		t.Fatalf("second round: %+v, %v after %d calls", rep, err, st.calls)
	}
	st.fail = errors.New("connection refused")
	if _, err := c.RunOnce(context.Background()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("a failing store: %v", err)
	}
	// Without MaxBatches a round goes on until a batch is not full.
	st.fail, st.left, st.calls = nil, 5500, 0
	c, _ = NewCleaner(st, CleanerConfig{OlderThan: time.Hour, BatchSize: 1000})
	if rep, err := c.RunOnce(context.Background()); rep.Sent != 5500 || err != nil || st.calls != 6 {
		t.Fatalf("an unbounded round: %+v, %v after %d calls", rep, err, st.calls)
	}
	// The inbox only, or both.
	st.left, st.inbox, st.calls = 10, 1500, 0
	c, _ = NewCleaner(st, CleanerConfig{InboxOlderThan: time.Hour, BatchSize: 1000})
	if rep, err := c.RunOnce(context.Background()); rep != (CleanerReport{Consumed: 1500}) || err != nil || st.calls != 2 {
		t.Fatalf("the inbox only: %+v, %v after %d calls", rep, err, st.calls)
	}
	st.inbox = 20
	c, _ = NewCleaner(st, CleanerConfig{OlderThan: time.Hour, InboxOlderThan: time.Hour})
	if rep, err := c.RunOnce(context.Background()); rep != (CleanerReport{Sent: 10, Consumed: 20}) || err != nil {
		t.Fatalf("both: %+v, %v", rep, err)
	}
}

// TestCleanerDutyCycle: after each full batch the cleaner waits
// took×(1−DutyCycle)/DutyCycle, and not after the last one; at the default
// it does not wait.
func TestCleanerDutyCycle(t *testing.T) {
	for _, duty := range []float64{1, 0.25} {
		st := &deleteStore{left: 3500, took: 5 * time.Millisecond}
		c, err := NewCleaner(st, CleanerConfig{OlderThan: time.Hour, BatchSize: 1000, DutyCycle: duty})
		if err != nil {
			t.Fatal(err)
		}
		var waits []time.Duration
		c.wait = func(_ context.Context, d time.Duration) bool { waits = append(waits, d); return true }
		if rep, err := c.RunOnce(context.Background()); rep.Sent != 3500 || err != nil {
			t.Fatalf("duty %v: %+v, %v", duty, rep, err)
		}
		if len(waits) != 3 {
			t.Fatalf("duty %v: %d waits %v, want one after each of the 3 full batches", duty, len(waits), waits)
		}
		for _, w := range waits {
			if duty == 1 && w != 0 {
				t.Errorf("duty 1: waited %s, want no wait", w)
			}
			// Each statement took at least 5ms: the wait is at least 3 times that.
			if duty == 0.25 && w < 15*time.Millisecond {
				t.Errorf("duty 0.25: waited %s after a statement of at least 5ms, want at least 15ms", w)
			}
		}
	}
	if got := dutyWait(100*time.Millisecond, 0.2); got != 400*time.Millisecond {
		t.Errorf("dutyWait(100ms, 0.2) = %s, want 400ms", got)
	}
}

// TestCleanerDutyCycleCancel: a stop during a duty-cycle wait ends the round
// at once with what it deleted.
func TestCleanerDutyCycleCancel(t *testing.T) {
	st := &deleteStore{left: 5000, took: 10 * time.Millisecond}
	c, err := NewCleaner(st, CleanerConfig{OlderThan: time.Hour, BatchSize: 1000, DutyCycle: 0.001})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	rep, err := c.RunOnce(ctx)
	if rep.Sent != 1000 || err != nil {
		t.Fatalf("cancelled round: %+v, %v; want the first batch of 1000", rep, err)
	}
	// The wait after the first statement is at least 10s.
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the round ended %s after it began, not at the stop", took)
	}
}

func TestCleanerRunOutlivesFailures(t *testing.T) {
	st := &deleteStore{fail: errors.New("connection refused")}
	var logs logBuffer
	c, err := NewCleaner(st, CleanerConfig{OlderThan: time.Hour, Interval: 5 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st.mu.Lock()
		calls := st.calls
		st.mu.Unlock()
		if calls >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	st.mu.Lock()
	st.fail, st.left = nil, 10
	st.mu.Unlock()
	for !strings.Contains(logs.String(), "sent=10") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	out := logs.String()
	if !strings.Contains(out, "round failed") || !strings.Contains(out, "sent=10 table=outbox consumed=0") {
		t.Fatalf("logs:\n%s", out)
	}
}

// roundHook records what CleanupHook.OnCleanup is given.
type roundHook struct {
	mu     sync.Mutex
	rounds []CleanerReport
	errs   []error
}

func (h *roundHook) OnCleanup(_ context.Context, rep CleanerReport, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rounds = append(h.rounds, rep)
	h.errs = append(h.errs, err)
}

func TestCleanerHooks(t *testing.T) {
	if _, err := NewCleaner(&deleteStore{}, CleanerConfig{OlderThan: time.Hour, Hooks: []any{"not a hook"}}); err == nil ||
		!strings.Contains(err.Error(), "string") {
		t.Fatalf("a value that is no hook: %v", err)
	}
	st := &deleteStore{fail: errors.New("connection refused")}
	h := &roundHook{}
	c, err := NewCleaner(st, CleanerConfig{OlderThan: time.Hour, InboxOlderThan: time.Hour, Interval: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Hooks: []any{h}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	rounds := func() int {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.rounds)
	}
	deadline := time.Now().Add(10 * time.Second)
	for rounds() < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	st.mu.Lock()
	st.fail, st.left, st.inbox = nil, 3, 4
	st.mu.Unlock()
	for time.Now().Before(deadline) {
		h.mu.Lock()
		found := slices.Contains(h.rounds, CleanerReport{Sent: 3, Consumed: 4})
		h.mu.Unlock()
		if found {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.errs[0] == nil || h.rounds[0] != (CleanerReport{}) {
		t.Fatalf("the failed round: %+v, %v", h.rounds[0], h.errs[0])
	}
	i := slices.Index(h.rounds, CleanerReport{Sent: 3, Consumed: 4})
	if i < 0 || h.errs[i] != nil {
		t.Fatalf("no round reported 3 and 4 deleted without an error: %+v %v", h.rounds, h.errs)
	}
}

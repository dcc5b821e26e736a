package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

func TestWaiterGrowsAndShrinks(t *testing.T) {
	w := &waiter{min: 5 * time.Millisecond, max: 40 * time.Millisecond, cur: 5 * time.Millisecond}
	var got []time.Duration
	for range 5 {
		w.settle(false)
		got = append(got, w.cur)
	}
	want := []time.Duration{10, 20, 40, 40, 40}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("waits %v, want %v ms", got, want)
		}
	}
	w.settle(true)
	if w.cur != w.min {
		t.Fatalf("after messages: %s, want %s", w.cur, w.min)
	}
}

func TestBatchGrowsUnderBacklog(t *testing.T) {
	r, err := NewRelay(newFakeStore(0), Discard, RelayConfig{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if r.cfg.BatchSize != 500 || r.cfg.MaxBatchSize != 2000 {
		t.Fatalf("defaults: batch %d, max %d", r.cfg.BatchSize, r.cfg.MaxBatchSize)
	}
	var limits []int
	for _, full := range []bool{true, true, true, false} {
		l := r.scaledLimit(r.cfg.BatchSize)
		limits = append(limits, l)
		n := l
		if !full {
			n = 1
		}
		r.noteBatch(n, l)
	}
	limits = append(limits, r.scaledLimit(r.cfg.BatchSize))
	if want := "[500 1000 2000 2000 500]"; fmt.Sprint(limits) != want {
		t.Fatalf("limits %s, want %s", fmt.Sprint(limits), want)
	}
	set, _ := NewRelay(newFakeStore(0), Discard, RelayConfig{BatchSize: 10, Logger: quiet()})
	if set.cfg.MaxBatchSize != 10 {
		t.Fatalf("BatchSize set: MaxBatchSize %d, want 10", set.cfg.MaxBatchSize)
	}
	if _, err := NewRelay(newFakeStore(0), Discard, RelayConfig{MinInterval: time.Second, Interval: time.Millisecond}); err == nil {
		t.Fatal("MinInterval above Interval accepted")
	}
}

// probingStore is a fakeStore with a DueChecker and a Watcher.
type probingStore struct {
	*fakeStore
	probes atomic.Int64
	due    atomic.Bool
	fail   atomic.Bool
	mu     sync.Mutex
	notify func(outboxdriver.Change)
}

func (s *probingStore) AnyDue(context.Context) (bool, error) {
	s.probes.Add(1)
	if s.fail.Load() {
		return false, errors.New("probe failed")
	}
	return s.due.Load(), nil
}

func (s *probingStore) Watch(ctx context.Context, fn func(outboxdriver.Change)) error {
	s.mu.Lock()
	s.notify = fn
	s.mu.Unlock()
	<-ctx.Done()
	return nil
}

func (s *probingStore) claims() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fakeStore.mu.Lock()
	defer s.fakeStore.mu.Unlock()
	return len(s.afterIDs)
}

// While the table is empty the relay asks the probe, not the claim; a
// probe that says yes, and a watcher's change, bring a claim at once.
func TestIdleProbesInsteadOfClaiming(t *testing.T) {
	st := &probingStore{fakeStore: newFakeStore(0)}
	r, err := NewRelay(st, Discard, RelayConfig{MinInterval: time.Millisecond, Interval: 4 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(200 * time.Millisecond)
	claims, probes := st.claims(), st.probes.Load()
	if claims > 2 || probes < 10 {
		t.Fatalf("idle: %d claims and %d probes, want the probes to stand in for the claims", claims, probes)
	}
	st.due.Store(true)
	time.Sleep(50 * time.Millisecond)
	if c := st.claims(); c < claims+3 {
		t.Fatalf("probe says due: claims %d → %d", claims, c)
	}
	st.due.Store(false)
	time.Sleep(50 * time.Millisecond)
	// A watcher's change brings a claim though the probe says no.
	before := st.claims()
	st.mu.Lock()
	fn := st.notify
	st.mu.Unlock()
	if fn == nil {
		t.Fatal("the relay did not watch")
	}
	fn(outboxdriver.Change{Via: "test"})
	deadline := time.Now().Add(time.Second)
	for st.claims() == before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st.claims() == before {
		t.Fatal("a change did not bring a claim")
	}
}

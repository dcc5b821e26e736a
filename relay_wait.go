package outbox

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

// Defaults of the wait between looks.
const (
	defaultMinInterval  = 5 * time.Millisecond
	maxBatchScale       = 4
	maxBatchSizeDefault = 10000
)

// waitDefaults fills the fields of the wait between looks; batchSet says
// that the caller chose BatchSize.
func (cfg *RelayConfig) waitDefaults(batchSet bool) {
	if cfg.MinInterval == 0 {
		cfg.MinInterval = min(defaultMinInterval, cfg.Interval)
	}
	if cfg.MaxBatchSize == 0 {
		cfg.MaxBatchSize = cfg.BatchSize
		if !batchSet {
			cfg.MaxBatchSize = min(cfg.BatchSize*maxBatchScale, maxBatchSizeDefault)
		}
	}
}

func (cfg RelayConfig) validateWait() error {
	switch {
	case cfg.MinInterval < 0:
		return fmt.Errorf("outbox: relay: MinInterval %s must not be negative", cfg.MinInterval)
	case cfg.MinInterval > cfg.Interval:
		return fmt.Errorf("outbox: relay: MinInterval %s exceeds Interval %s", cfg.MinInterval, cfg.Interval)
	case cfg.MaxBatchSize < cfg.BatchSize || cfg.MaxBatchSize > 10000:
		return fmt.Errorf("outbox: relay: MaxBatchSize %d must be in BatchSize (%d)..10000", cfg.MaxBatchSize, cfg.BatchSize)
	}
	return nil
}

// waiter is the adaptive wait of Run's loop: MinInterval after a look that
// found messages, doubling with each look that finds none, up to Interval.
type waiter struct {
	min, max, cur time.Duration
	// slow, when set and positive, is the wait instead (sweepWait).
	slow func() time.Duration
}

func (r *Relay) newWaiter() *waiter {
	w := &waiter{min: r.cfg.MinInterval, max: r.cfg.Interval, cur: r.cfg.MinInterval}
	if r.cfg.CDC {
		w.slow = r.sweepWait
	}
	return w
}

// settle sets the next wait after a look that found messages or not.
func (w *waiter) settle(found bool) {
	if w.slow != nil {
		if d := w.slow(); d > 0 {
			w.cur = d // a CDC relay that streams or stands by: a sweep
			return
		}
	}
	if found {
		w.cur = w.min
		return
	}
	w.cur = min(max(w.cur*2, time.Millisecond), w.max)
}

// batchScale is how many BatchSize batches the next claim takes, doubled
// after each full batch and reset by a short one, so that a backlog is
// worked off in fewer, larger claims.
type batchScale struct{ n atomic.Int32 }

// limit scales the health's claim limit, when it is the healthy BatchSize.
func (r *Relay) scaledLimit(limit int) int {
	if limit != r.cfg.BatchSize {
		return limit // narrowing or probing: the health decides
	}
	return min(limit*max(1, int(r.scale.n.Load())), r.cfg.MaxBatchSize)
}

// noteBatch adjusts the batch scale after a batch of n messages claimed
// with limit.
func (r *Relay) noteBatch(n, limit int) {
	s := r.scale.n.Load()
	switch {
	case n >= limit && limit < r.cfg.MaxBatchSize:
		r.scale.n.Store(max(2, s*2))
	case n < limit && s > 1:
		r.scale.n.Store(1)
	}
}

// idle waits between looks while the table has nothing due: it sleeps the
// adaptive wait, and then, with a DueChecker, asks it rather than claiming,
// for as long as it answers no (the first look after one that found
// messages claims without asking). It returns false when ctx ends. A wake-up
// (Wake, a Watcher) ends the wait without asking, at least MinInterval after
// the last look (looked).
func (r *Relay) idle(ctx context.Context, w *waiter, found bool, looked time.Time) bool {
	w.settle(found)
	dc, _ := r.store.(outboxdriver.DueChecker)
	for first := true; ; first = false {
		woken, ok := r.sleepWoken(ctx, w.cur)
		if !ok {
			return false
		}
		if woken {
			// Wake-ups come with every commit: under load they would
			// have the relay claim a few rows at a time, back to back.
			// Looks stay MinInterval apart.
			if rest := w.min - time.Since(looked); rest > 0 && !r.sleep(ctx, rest) {
				return false
			}
			return true
		}
		if dc == nil || (first && found) {
			// After a look that found messages more are likely: claim.
			return true
		}
		due, err := dc.AnyDue(ctx)
		if err != nil || due {
			// An error: the claim meets it too, and pauses.
			return true
		}
		w.settle(false)
	}
}

// sleepWoken waits d, or less when the relay is woken (woken true); ok is
// false when ctx ends.
func (r *Relay) sleepWoken(ctx context.Context, d time.Duration) (woken, ok bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-r.wake:
		return true, true
	case <-t.C:
		return false, true
	}
}

// startWatch runs watch until the function it returns is called.
func (r *Relay) startWatch(ctx context.Context) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.watch(wctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// watch runs the store's Watcher, if it has one, until ctx ends: every
// change wakes the relay. When watching fails the relay polls; it logs the
// first failure at Warn and the next ones at Debug, and tries again after a
// pause that doubles up to PauseMax.
func (r *Relay) watch(ctx context.Context) {
	wt, ok := r.store.(outboxdriver.Watcher)
	if !ok || r.cfg.NoWatch {
		return
	}
	log := r.cfg.Logger
	pause := time.Duration(0)
	var fellBack atomic.Bool
	wake := func(c outboxdriver.Change) {
		// A CDC relay has said so already (streamLoop).
		if c.Fallback != nil && !r.cfg.CDC && !fellBack.Swap(true) {
			log.Warn("outbox relay: cannot stream the outbox table's changes; waking on notifications instead", "error", c.Fallback)
		}
		r.Wake()
	}
	for failures := 0; ; failures++ {
		start := time.Now()
		err := wt.Watch(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > r.cfg.PauseMax {
			pause, failures = 0, 0 // it watched for a while: a new failure
		}
		pause = r.nextPause(pause)
		if failures == 0 {
			log.Warn("outbox relay: cannot watch for commits; polling until it can", "error", err, "retry_in", pause)
		} else {
			log.Debug("outbox relay: watching for commits failed again", "error", err, "retry_in", pause)
		}
		r.Wake() // commits may have been missed
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

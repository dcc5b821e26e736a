package outbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

// Run relays until ctx is cancelled, then finishes the batch in flight, records
// its outcome and returns nil. Database errors and an unreachable broker pause
// the relay with backoff; they do not end Run.
//
// Run overlaps the database and the broker: while one batch is with the
// broker and being marked, the next is claimed, so that a relay waits for the
// two at once instead of one after the other. Batches are still published
// one after the other, in claim order. A store that implements
// outboxdriver.ClaimOverlapper may ask for less overlap (SQLite: the claim only beside
// the publish). Run holds up to two claims.
//
// With RelayConfig.CDC, Run streams instead (see runCDC in relay_cdc.go):
// one relay of the table reads the store's change stream and publishes the
// messages in commit order, and every relay sweeps the table every
// SweepInterval for the rows the stream did not settle. Where the server
// cannot stream, Run says so once in its log and polls.
func (r *Relay) Run(ctx context.Context) error {
	if r.cfg.CDC {
		return r.runCDC(ctx)
	}
	return r.runPolling(ctx, true)
}

// runPolling is Run's polling loop; watch runs the store's Watcher beside it.
func (r *Relay) runPolling(ctx context.Context, watch bool) error {
	p := &pipeline{batches: make(chan batch)}
	if o, ok := r.store.(outboxdriver.ClaimOverlapper); ok {
		p.overlap = o.ClaimOverlap()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.publishLoop(ctx, p)
	}()
	defer func() {
		close(p.batches)
		<-done
	}()
	if watch {
		defer r.startWatch(ctx)()
	}
	log := r.cfg.Logger
	pause := time.Duration(0)
	w := r.newWaiter()
	for {
		if until := p.pausedUntil(); !until.IsZero() {
			if !r.sleep(ctx, time.Until(until)) {
				return nil
			}
			// Rows the pause released lie below the cursor: look from the start.
			r.moveCursor(0)
		}
		if ctx.Err() != nil {
			return nil
		}
		b, err := p.claim(ctx, r)
		looked := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			pause = r.nextPause(pause)
			log.Warn("outbox relay: batch failed; pausing", "error", err, "pause", pause)
			if !r.sleep(ctx, pause) {
				return nil
			}
			continue
		}
		pause = 0
		if len(b.msgs) > 0 {
			if p.overlap == outboxdriver.OverlapNone {
				b.handled = make(chan struct{})
			}
			select {
			case p.batches <- b:
			case <-ctx.Done():
				b.claim.Abort(context.WithoutCancel(ctx))
				return nil
			}
			if b.handled != nil {
				// Claim the next batch only once b is marked.
				select {
				case <-b.handled:
				case <-ctx.Done():
					return nil
				}
			}
		}
		if len(b.msgs) >= b.limit || b.fromCursor {
			continue // more may be due: a full batch, or rows below the cursor
		}
		if !r.idle(ctx, w, len(b.msgs) > 0, looked) {
			return nil
		}
	}
}

// pipeline connects Run's claiming loop with its publishing goroutine.
type pipeline struct {
	batches chan batch
	overlap outboxdriver.ClaimOverlap
	// db is held around claims and marks with OverlapPublish.
	db sync.Mutex

	// last is the claim of the batch handed to the publisher last, which it
	// may still hold, and lastMsgs its messages.
	last     outboxdriver.Claim
	lastMsgs []Message
	// failed: the keys of the batch the publisher handled last whose
	// messages did not go (see Relay.failedKeys). The publisher's own.
	failed map[string]int64

	mu    sync.Mutex
	until time.Time // the broker or the database asked for a pause until then

	// spanLast is the last id of the run of whole claims (see extendSpan),
	// or 0 when there is none.
	spanMu   sync.Mutex
	spanLast int64
}

// extendSpan reports whether b, just claimed, continues a run of claims
// that together hold every NEW row below its last id other than requeued
// ones (outboxdriver.HoldParams.Whole). inflight are the messages of the
// claim before. A claim holds its span when its messages and inflight
// have every id from where it began (outboxdriver.ClaimSpan) to its last.
// A run starts at such a claim from the first id (which began at the
// low-water mark), goes on with each such claim from the cursor the claim
// before it left, and ends at any other claim and at any batch that does
// not finish cleanly (breakSpan).
func (p *pipeline) extendSpan(b batch, inflight []Message) bool {
	from, ok := int64(0), false
	if cs, is := b.claim.(outboxdriver.ClaimSpan); is {
		from, ok = cs.SpanFrom()
	}
	last := b.msgs[len(b.msgs)-1].ID
	p.spanMu.Lock()
	defer p.spanMu.Unlock()
	if ok && (!b.fromCursor || (p.spanLast != 0 && from == p.spanLast)) && holdsSpan(from, last, b.msgs, inflight) {
		p.spanLast = last
		return true
	}
	p.spanLast = 0
	return false
}

// holdsSpan reports whether msgs and inflight (each in id order, with no id
// in both) have every id above from up to last.
func holdsSpan(from, last int64, msgs, inflight []Message) bool {
	n := int64(0)
	for _, ms := range [][]Message{msgs, inflight} {
		for i := range ms {
			if id := ms[i].ID; id > from && id <= last {
				n++
			}
		}
	}
	return n == last-from
}

// breakSpan ends the run of whole claims unless b finished cleanly: marked
// (markErr nil) within half its lease, with no message left as it was
// (OutcomeRelease). A message released, a mark that failed or came late
// may leave a row NEW that no check of the run's later claims would see.
func (p *pipeline) breakSpan(r *Relay, b batch, outcomes []Outcome, markErr error) {
	clean := markErr == nil && outcomes != nil && time.Since(b.start) < r.cfg.Lease/2
	for _, o := range outcomes {
		clean = clean && o.Kind != OutcomeRelease
	}
	if !clean {
		p.spanMu.Lock()
		p.spanLast = 0
		p.spanMu.Unlock()
	}
}

// claim claims the next batch; an empty claim is ended at once.
func (p *pipeline) claim(ctx context.Context, r *Relay) (batch, error) {
	defer p.dbTurn()()
	b, err := r.claimBatch(ctx, p.last)
	if err == nil && len(b.msgs) > 0 {
		r.holdEarly(ctx, &b, p.lastMsgs, p.extendSpan(b, p.lastMsgs))
		p.last, p.lastMsgs = b.claim, b.msgs
	}
	if err == nil && len(b.msgs) == 0 {
		if err = b.claim.Finish(context.WithoutCancel(ctx), nil); err != nil {
			err = fmt.Errorf("ending an empty claim: %w", err)
		}
	}
	return b, err
}

// dbTurn waits for the store's turn when claims and marks must not overlap
// (OverlapPublish) and returns the function that ends it.
func (p *pipeline) dbTurn() (done func()) {
	if p.overlap != outboxdriver.OverlapPublish {
		return func() {}
	}
	p.db.Lock()
	return p.db.Unlock
}

func (p *pipeline) pausedUntil() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !time.Now().Before(p.until) {
		p.until = time.Time{}
	}
	return p.until
}

func (p *pipeline) pauseFor(d time.Duration) {
	p.mu.Lock()
	p.until = time.Now().Add(d)
	p.mu.Unlock()
}

// publishLoop publishes and marks the batches Run claims, one at a time. A
// batch that arrives during a pause or after ctx is cancelled is released
// unpublished, and so is one that has waited so long that its publish
// window (publishWindow) is less than half a PublishTimeout.
func (r *Relay) publishLoop(ctx context.Context, p *pipeline) {
	pause := time.Duration(0)
	for b := range p.batches {
		pause = r.publishOne(ctx, p, b, pause)
		if b.handled != nil {
			close(b.handled)
		}
	}
}

// publishOne publishes and marks one batch, or releases it, and returns the
// pause now in force (0 when all went well).
func (r *Relay) publishOne(ctx context.Context, p *pipeline, b batch, pause time.Duration) time.Duration {
	log := r.cfg.Logger
	if ctx.Err() != nil || !p.pausedUntil().IsZero() || r.publishWindow(b) < r.cfg.PublishTimeout/2 {
		if err := b.claim.Abort(context.WithoutCancel(ctx)); err != nil {
			log.Warn("outbox relay: releasing a claimed batch failed", "error", err)
		}
		p.failed = r.failedKeys(b, nil, errNotAttempted)
		p.breakSpan(r, b, nil, errNotAttempted)
		return pause
	}
	b.failedBefore = p.failed
	rep, outcomes, j := r.publishBatch(ctx, b)
	endTurn := p.dbTurn()
	rep, err := r.finishBatch(ctx, b, rep, outcomes)
	endTurn()
	p.failed = r.failedKeys(b, outcomes, err)
	p.breakSpan(r, b, outcomes, err)
	// The broker's own word on when to come back (a Retry-After) may
	// lengthen a pause, not the backoff: the next pause doubles from the
	// relay's own.
	asked := min(RetryAfter(j.reason), r.cfg.PauseMax)
	switch {
	case err != nil:
		pause = r.nextPause(pause)
		p.pauseFor(pause)
		log.Warn("outbox relay: batch failed; pausing", "error", err, "pause", pause)
	case j.verdict == outage:
		pause = min(r.nextPause(pause), r.cfg.ProbeInterval)
		p.pauseFor(max(pause, asked))
		if j.opened {
			log.Warn("outbox relay: broker outage; pausing without spending retries, probing one message every "+r.cfg.ProbeInterval.String(),
				"released", rep.Released, "error", j.reason)
		}
	case j.verdict == narrow:
		p.pauseFor(max(narrowPause, asked))
		log.Info("outbox relay: a batch broke off as unavailable; trying fewer messages to find out whether one of them is the cause",
			"released", rep.Released, "error", j.reason)
		pause = 0
	default:
		pause = 0
	}
	if j.closed {
		log.Info("outbox relay: broker is back; resuming", "down_for", j.downFor.Round(time.Millisecond), "probes", j.probes)
	}
	return pause
}

// sleep waits d, or less when the relay is woken; it reports false when ctx
// is cancelled.
func (r *Relay) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-r.wake:
	case <-t.C:
	}
	return true
}

func (r *Relay) nextPause(prev time.Duration) time.Duration {
	if prev == 0 {
		return r.cfg.PauseBase
	}
	return min(prev*2, r.cfg.PauseMax)
}

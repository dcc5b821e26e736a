package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

// The states of a CDC relay (Relay.cdc).
const (
	// cdcPolling: the relay polls as a relay without CDC does (the stream
	// is unavailable, or failed and waits to start again).
	cdcPolling int32 = iota
	// cdcStreaming: the relay's stream runs; its polling is a sweep.
	cdcStreaming
	// cdcStandby: another relay streams; this one sweeps and waits to
	// take over.
	cdcStandby
)

// Waits of the CDC relay between two tries of the stream.
const (
	standbyRetry     = 2 * time.Second
	unavailableRetry = time.Minute
)

// errStreamOutage ends a stream whose batch met a broker outage: the relay
// pauses and probes as it does when polling, and streams again after.
var errStreamOutage = errors.New("outbox: broker outage while streaming")

func (cfg RelayConfig) validateCDC(store outboxdriver.Claimer) error {
	if !cfg.CDC {
		return nil
	}
	if _, ok := store.(outboxdriver.Streamer); !ok {
		return fmt.Errorf("outbox: relay: CDC needs a store that streams its changes (Streamer); a %s store does not", store.Dialect())
	}
	if _, ok := store.(outboxdriver.IDClaimer); !ok {
		return fmt.Errorf("outbox: relay: CDC needs a store that claims by id (IDClaimer); a %s store does not", store.Dialect())
	}
	return nil
}

// sweepWait is the wait of the polling loop of a CDC relay: SweepInterval
// while it streams or stands by, 0 (the adaptive wait) while it polls.
func (r *Relay) sweepWait() time.Duration {
	if r.cdc.Load() == cdcPolling {
		return 0
	}
	return r.cfg.SweepInterval
}

// runCDC is Run with RelayConfig.CDC: the stream (streamLoop) beside the
// polling loop, which sweeps every SweepInterval while the relay streams or
// stands by, and polls as usual while it cannot stream.
//
// A message reaches the broker from the stream only through a claim by id
// (IDClaimer), which takes the rows still NEW and held by no other claim,
// so that neither another relay nor the sweep publishes it at the same
// time; it becomes SENT only once the broker acked it, through the same
// Finish as a polled batch, and a refusal goes the same retry and DEAD way.
// Rows the stream did not settle (committed before it started, retried,
// held back behind their key, left by an outage, or after a crash) are
// still NEW, and the sweep finds them.
func (r *Relay) runCDC(ctx context.Context) error {
	st := r.store.(outboxdriver.Streamer)
	r.cdc.Store(cdcStreaming)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.streamLoop(sctx, st)
	}()
	defer func() {
		cancel()
		<-done
	}()
	return r.runPolling(ctx, false)
}

// streamLoop runs the store's stream until ctx ends, and starts it again
// after each end: at once after it streamed a while, after a pause that
// doubles up to PauseMax after a failure, every 2s while another relay
// streams (standby), every minute while the server cannot stream, during
// which the store's Watcher wakes the polling loop.
func (r *Relay) streamLoop(ctx context.Context, st outboxdriver.Streamer) {
	log := r.cfg.Logger
	var stopWatch func()
	defer func() {
		if stopWatch != nil {
			stopWatch()
		}
	}()
	pause := time.Duration(0)
	var last error // the kind of the last end, so that each is logged once
	for {
		r.cdc.Store(cdcStreaming)
		start := time.Now()
		err := st.Stream(ctx, r.streamed)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("outbox: the stream ended")
		}
		wait := time.Duration(0)
		switch {
		case errors.Is(err, outboxdriver.ErrStreamUnavailable):
			r.cdc.Store(cdcPolling)
			if stopWatch == nil {
				stopWatch = r.startWatch(ctx)
			}
			if !errors.Is(last, outboxdriver.ErrStreamUnavailable) {
				log.Warn("outbox relay: cannot stream the outbox table's changes; polling instead", "error", err, "retry_in", unavailableRetry)
			}
			wait = unavailableRetry
		case errors.Is(err, outboxdriver.ErrStreamBusy):
			r.cdc.Store(cdcStandby)
			if !errors.Is(last, outboxdriver.ErrStreamBusy) {
				log.Info("outbox relay: another relay streams the outbox table; standing by", "sweep_interval", r.cfg.SweepInterval)
			}
			wait = standbyRetry
		default:
			r.cdc.Store(cdcPolling)
			if time.Since(start) > r.cfg.PauseMax {
				pause = 0 // it streamed for a while: a new failure
			}
			pause = r.nextPause(pause)
			if errors.Is(err, errStreamOutage) {
				pause = min(pause, r.cfg.ProbeInterval)
			}
			if last == nil || errors.Is(last, outboxdriver.ErrStreamBusy) || errors.Is(last, outboxdriver.ErrStreamUnavailable) {
				log.Warn("outbox relay: the change stream ended; polling until it starts again", "error", err, "retry_in", pause)
			} else {
				log.Debug("outbox relay: the change stream ended again", "error", err, "retry_in", pause)
			}
			wait = pause
		}
		if stopWatch != nil && !errors.Is(err, outboxdriver.ErrStreamUnavailable) {
			stopWatch()
			stopWatch = nil
		}
		last = err
		if !errors.Is(err, outboxdriver.ErrStreamBusy) {
			// The stream's messages not settled are the sweep's. A relay
			// refused the stream held none, and sweeps at its interval.
			r.Wake()
		}
		if !sleepCtx(ctx, wait) {
			return
		}
	}
}

// sleepCtx waits d; it reports false when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// streamed is the CDC relay's Stream callback: it publishes msgs, in the
// stream's (commit) order, MaxBatchSize at a time.
func (r *Relay) streamed(ctx context.Context, msgs []Message) error {
	r.cdc.Store(cdcStreaming)
	for len(msgs) > 0 {
		n := min(len(msgs), r.cfg.MaxBatchSize)
		if err := r.deliverStreamed(ctx, msgs[:n]); err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

// deliverStreamed claims msgs by id, publishes those claimed in msgs'
// order and marks them. It returns an error, which ends the stream, when
// the claim or the mark failed or the broker is down: the rows are then
// still NEW, for the sweep.
func (r *Relay) deliverStreamed(ctx context.Context, msgs []Message) error {
	ids := make([]int64, len(msgs))
	for i := range msgs {
		ids[i] = msgs[i].ID
	}
	for try := 0; len(ids) > 0; try++ {
		left, err := r.deliverIDs(ctx, ids)
		if err != nil || len(left) == 0 || try > 0 {
			return err
		}
		// The stream can report a commit a moment before it is visible to
		// other sessions: look once more for the ids the claim did not
		// find. Rows another claim holds are the sweep's.
		if !sleepCtx(ctx, streamRecheck) {
			return nil
		}
		ids = left
	}
	return nil
}

// streamRecheck is the wait before the second claim of streamed ids.
const streamRecheck = time.Millisecond

// deliverIDs claims, publishes and marks the rows of ids and returns the
// ids it did not claim.
func (r *Relay) deliverIDs(ctx context.Context, ids []int64) (left []int64, err error) {
	start := time.Now()
	c, err := r.store.(outboxdriver.IDClaimer).ClaimIDs(ctx, ids, r.cfg.Lease)
	if ctx.Err() == nil {
		r.noteDB(err)
	}
	if err != nil {
		return nil, fmt.Errorf("claim streamed messages: %w", err)
	}
	oc := inOrder(c, ids)
	for _, id := range ids {
		if _, ok := oc.at[id]; !ok {
			left = append(left, id)
		}
	}
	if len(oc.msgs) == 0 {
		return left, c.Finish(context.WithoutCancel(ctx), nil)
	}
	b := batch{claim: oc, msgs: oc.msgs, limit: len(ids), start: start, claimTook: time.Since(start)}
	rep, err := r.deliver(ctx, b)
	if err != nil {
		return nil, err
	}
	if rep.Outage != nil {
		return nil, fmt.Errorf("%w: %w", errStreamOutage, rep.Outage)
	}
	return left, nil
}

// orderedClaim presents a claim's messages in the order of the stream
// (commit order) rather than id order, and hands Finish the outcomes back
// in the claim's own order.
type orderedClaim struct {
	outboxdriver.Claim
	msgs []Message
	pos  []int // pos[i]: the index in Claim.Messages() of msgs[i]
	at   map[int64]int
}

// inOrder orders c's messages as ids lists them.
func inOrder(c outboxdriver.Claim, ids []int64) *orderedClaim {
	got := c.Messages()
	at := make(map[int64]int, len(got))
	for i := range got {
		at[got[i].ID] = i
	}
	oc := &orderedClaim{Claim: c, msgs: make([]Message, 0, len(got)), pos: make([]int, 0, len(got))}
	for _, id := range ids {
		if i, ok := at[id]; ok {
			oc.msgs = append(oc.msgs, got[i])
			oc.pos = append(oc.pos, i)
		}
	}
	oc.at = at
	return oc
}

func (c *orderedClaim) Messages() []Message { return c.msgs }

func (c *orderedClaim) Finish(ctx context.Context, outcomes []Outcome) error {
	if len(outcomes) != len(c.msgs) {
		return fmt.Errorf("outbox: finish: %d outcomes for %d messages", len(outcomes), len(c.msgs))
	}
	out := make([]Outcome, len(outcomes))
	for i, p := range c.pos {
		out[p] = outcomes[i]
	}
	return c.Claim.Finish(ctx, out)
}

package outboxredis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
	"github.com/outbox-go/outbox/internal/redelivery"
)

// runner is the state of one Run.
type runner struct {
	s         *Subscriber
	ctx       context.Context // Run's: ends the loop
	hctx      context.Context // the handler's: outlives ctx by StopTimeout
	h         outbox.Handler
	cursor    string // XAUTOCLAIM's position in the pending entries list
	lastClaim time.Time
}

func (r *runner) loop() error {
	pause := time.Duration(0)
	for r.ctx.Err() == nil {
		err := r.step()
		if err == nil {
			pause = 0
			continue
		}
		switch {
		case redis.HasErrorPrefix(err, "UNBLOCKED"):
			// The stream was deleted while XREADGROUP waited on it; the
			// next read finds out whether the group is gone too.
			continue
		case errors.Is(err, redis.ErrClosed):
			return errors.New("outboxredis: Subscriber.Run: the subscriber was closed while running")
		case redis.HasErrorPrefix(err, "NOGROUP"):
			// The stream or the group is gone: Redis restarted without
			// persistence, or someone deleted them. Everything in the
			// stream now is new to the group.
			err = r.s.createGroup(r.ctx, "0")
			if err == nil {
				continue
			}
			if !outbox.IsUnavailable(err) {
				return err
			}
		case !unavailable(err):
			return fmt.Errorf("outboxredis: consuming stream %s as group %q: %w%s", r.s.stream, r.s.cfg.Group, err, hint(err))
		}
		pause = min(max(2*pause, 50*time.Millisecond), 2*time.Second)
		t := time.NewTimer(pause)
		select {
		case <-r.ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// step reclaims idle entries when it is time to, then reads new ones.
func (r *runner) step() error {
	if time.Since(r.lastClaim) >= r.s.claimEvery {
		more, err := r.reclaim()
		if err != nil {
			return err
		}
		r.lastClaim = time.Now()
		if more {
			// The pending entries list has more to scan: go on at once.
			r.lastClaim = time.Time{}
		}
		if r.ctx.Err() != nil {
			return nil
		}
	}
	return r.readNew()
}

func (r *runner) opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.ctx), opTimeout+r.s.block)
}

// readNew reads entries never delivered to the group. The read is not
// canceled with Run's context: entries it takes count as delivered, and an
// answer lost on the way would cost them a delivery.
func (r *runner) readNew() error {
	ctx, cancel := r.opContext()
	defer cancel()
	res, err := r.s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group:    r.s.cfg.Group,
		Consumer: r.s.cfg.Consumer,
		Streams:  []string{r.s.stream, ">"},
		Count:    int64(r.s.cfg.BatchSize),
		Block:    r.s.block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, st := range res {
		counts := make([]int64, len(st.Messages))
		for i := range counts {
			counts[i] = 1
		}
		if err := r.handleAll(st.Messages, counts); err != nil {
			return err
		}
	}
	return nil
}

// reclaim takes over entries idle for MinIdle (XAUTOCLAIM) and handles them.
// It reports whether the scan of the pending entries list has more to go.
func (r *runner) reclaim() (more bool, err error) {
	ctx, cancel := r.opContext()
	defer cancel()
	msgs, next, err := r.s.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream:   r.s.stream,
		Group:    r.s.cfg.Group,
		Consumer: r.s.cfg.Consumer,
		MinIdle:  r.s.cfg.MinIdle,
		Start:    r.cursor,
		Count:    int64(r.s.cfg.BatchSize),
	}).Result()
	if err != nil {
		return false, err
	}
	r.cursor = next
	more = next != "0-0" && next != ""
	if len(msgs) == 0 {
		return more, nil
	}
	// XAUTOCLAIM counted a delivery for each entry but does not say how
	// many there were; XPENDING does.
	pipe := r.s.rdb.Pipeline()
	cmds := make([]*redis.XPendingExtCmd, len(msgs))
	for i, m := range msgs {
		cmds[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: r.s.stream, Group: r.s.cfg.Group, Start: m.ID, End: m.ID, Count: 1,
		})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	var claimed []redis.XMessage
	var counts []int64
	for i, m := range msgs {
		pend, err := cmds[i].Result()
		if err != nil || len(pend) == 0 || pend[0].Consumer != r.s.cfg.Consumer {
			continue // acknowledged or taken over meanwhile
		}
		claimed = append(claimed, m)
		counts = append(counts, pend[0].RetryCount)
	}
	return more, r.handleAll(claimed, counts)
}

// handleAll handles entries in order. When Run's context ends before all
// are handled, the rest are given back to the group. The entries not yet
// settled, the one in hand and those waiting behind it, are kept claimed
// (keepClaimed) for as long as the batch takes, so that no other consumer
// takes a waiting entry as idle and handles it as well.
func (r *runner) handleAll(msgs []redis.XMessage, deliveries []int64) error {
	if r.s.cfg.Concurrency > 1 && len(msgs) > 1 {
		return r.handleByKey(msgs, deliveries)
	}
	ids := make([]string, len(msgs))
	for i := range msgs {
		ids[i] = msgs[i].ID
	}
	var next atomic.Int64 // the first entry not yet settled
	stop := r.keepClaimed(func() []string { return ids[next.Load():] })
	defer stop()
	for i := range msgs {
		if r.ctx.Err() != nil {
			stop()
			r.release(msgs[i:], deliveries[i:])
			return nil
		}
		err := r.handle(&msgs[i], deliveries[i])
		next.Store(int64(i + 1))
		if err != nil {
			return err
		}
	}
	return nil
}

// handleByKey is handleAll with Concurrency above 1: the entries of one key
// in order, keys in parallel (outbox.GoByKey). After an error, or once Run's
// context ends, no entry is started: the ones not started are given back
// to the group when the context ended, else left pending.
func (r *runner) handleByKey(msgs []redis.XMessage, deliveries []int64) error {
	key := AttributePrefix + cloudevents.PartitionKey
	var mu sync.Mutex
	unsettled := make(map[string]bool, len(msgs))
	for i := range msgs {
		unsettled[msgs[i].ID] = true
	}
	stop := r.keepClaimed(func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Collect(maps.Keys(unsettled))
	})
	defer stop()
	var first error
	var notStarted []int
	outbox.GoByKey(len(msgs), func(i int) string { k, _ := msgs[i].Values[key].(string); return k }, r.s.cfg.Concurrency, func(group []int) {
		for n, i := range group {
			mu.Lock()
			if first != nil || r.ctx.Err() != nil {
				notStarted = append(notStarted, group[n:]...)
				mu.Unlock()
				return
			}
			mu.Unlock()
			err := r.handle(&msgs[i], deliveries[i])
			mu.Lock()
			delete(unsettled, msgs[i].ID)
			if err != nil && first == nil {
				first = err
			}
			mu.Unlock()
		}
	})
	if first == nil && len(notStarted) > 0 {
		stop()
		slices.Sort(notStarted)
		rest, counts := make([]redis.XMessage, len(notStarted)), make([]int64, len(notStarted))
		for k, i := range notStarted {
			rest[k], counts[k] = msgs[i], deliveries[i]
		}
		r.release(rest, counts)
	}
	return first
}

// release gives entries this consumer took but did not hand to the handler
// back to the group: it marks them idle for MinIdle, so that XAUTOCLAIM
// hands them on at once, and takes back the delivery that was counted. On
// failure they come back after MinIdle anyway, one delivery spent.
func (r *runner) release(msgs []redis.XMessage, deliveries []int64) {
	if len(msgs) == 0 {
		return
	}
	ctx, cancel := r.opContext()
	defer cancel()
	pipe := r.s.rdb.Pipeline()
	for i, m := range msgs {
		pipe.Do(ctx, "XCLAIM", r.s.stream, r.s.cfg.Group, r.s.cfg.Consumer, 0, m.ID,
			"IDLE", r.s.cfg.MinIdle.Milliseconds(), "RETRYCOUNT", max(deliveries[i]-1, 0), "JUSTID")
	}
	_, _ = pipe.Exec(ctx)
}

// handle delivers one entry and settles it: ack, dead letter, or pending.
func (r *runner) handle(e *redis.XMessage, deliveries int64) error {
	limit := int64(r.s.cfg.MaxDeliveries)
	m, err := decodeEntry(e.Values)
	if err != nil {
		return r.deadLetter(e, deliveries, err.Error())
	}
	if deliveries > limit {
		return r.deadLetter(e, deliveries, fmt.Sprintf("delivered %d times, over MaxDeliveries (%d): a consumer stopped or died while handling it", deliveries, limit))
	}
	s := r.s
	policy := redelivery.Policy{MaxDeliveries: s.cfg.MaxDeliveries, Delay: s.cfg.RedeliveryDelay,
		DelayMax: s.cfg.RedeliveryDelayMax, DeadLetterAfter: s.cfg.DeadLetterAfter}
	// Redis counted this delivery; the handler's failures before it were
	// in earlier deliveries.
	res := policy.Deliver(int(deliveries-1), func() error { return r.h(r.hctx, m) },
		func(d time.Duration) bool {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-r.ctx.Done():
				return false
			case <-t.C:
				return true
			}
		}, nil)
	switch res.Outcome {
	case redelivery.Handled:
		ctx, cancel := r.opContext()
		defer cancel()
		return s.rdb.XAck(ctx, s.stream, s.cfg.Group, e.ID).Err()
	case redelivery.DeadLetter:
		if outbox.IsPermanent(res.Err) {
			return r.deadLetter(e, int64(res.Deliveries), "permanent handler error: "+res.Err.Error())
		}
		return r.deadLetter(e, int64(res.Deliveries), fmt.Sprintf("handler failed on delivery %d (MaxDeliveries %d, failing for DeadLetterAfter %s): %v",
			res.Deliveries, limit, s.cfg.DeadLetterAfter, res.Err))
	}
	// Stopping between two calls: left pending, delivered again after
	// MinIdle.
	return nil
}

// keepClaimed resets the idle time of the entries ids returns every
// MinIdle/2, until stop, so that no other consumer reclaims them meanwhile.
// XCLAIM with JUSTID does not count a delivery. The returned stop waits for
// a claim in flight; calling it again does nothing.
func (r *runner) keepClaimed(ids func() []string) (stop func()) {
	every := r.s.cfg.MinIdle / 2
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if list := ids(); len(list) > 0 {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), every)
			_ = r.s.rdb.XClaimJustID(ctx, &redis.XClaimArgs{
				Stream: r.s.stream, Group: r.s.cfg.Group, Consumer: r.s.cfg.Consumer, Messages: list,
			}).Err()
			cancel()
		}
		t.Reset(every)
	})
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

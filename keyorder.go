package outbox

import (
	"context"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

// RetriedHeader is the header a DEAD message carries once a person has
// retried it (`outbox dead retry`, a driver's RetryDead): the time of the
// retry, RFC 3339 in UTC. Such a message is published after the messages of its key
// that were sent while it was DEAD, so a consumer that needs a key's order
// can tell it from one in order. Transports carry it as the CloudEvents
// extension of the same name.
const RetriedHeader = "outboxretried"

// deadWait is how long a message held behind a DEAD one of its key waits
// before the relay looks at it again (with StopKeyAtDead). RetryDead and
// DropDead let such a key's messages go at once.
const deadWait = time.Minute

// heldWait is how long a message held behind one of its key that waits out
// a backoff waits before the relay looks at it again, unless the store
// releases it first (when it marks the blocker SENT or DEAD). Long, so that
// each retry of a failing blocker does not bring its key's whole backlog
// due with it.
const heldWait = 10 * time.Second

// holdBack asks a KeyOrderer store which of msgs must wait for an earlier
// message of their key. It returns nil when none must, when no message has a
// key, or when the store keeps no order. When the store cannot tell, every
// message with a key is held (left NEW, due as before) and err says why.
// inflight are the messages of the claim before, which do not hold msgs back
// (see heldBehind). The check gets half of b's publish window, whether or
// not ctx is cancelled. whole is HoldParams.Whole.
func (r *Relay) holdBack(ctx context.Context, b batch, inflight []Message, whole bool) (held []bool, err error) {
	msgs := b.msgs
	ko, ok := r.store.(outboxdriver.KeyOrderer)
	if !ok || !anyKey(msgs) {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(r.publishWindow(b)/2, time.Millisecond))
	defer cancel()
	held, err = ko.HoldBack(ctx, msgs, outboxdriver.HoldParams{DeadBlocks: r.cfg.StopKeyAtDead, DeadWait: deadWait, HeldWait: heldWait,
		InFlight: inflight, Done: r.keysDoneFor(msgs), Whole: whole})
	if err == nil {
		return held, nil
	}
	held = make([]bool, len(msgs))
	for i := range msgs {
		held[i] = msgs[i].Key != ""
	}
	return held, err
}

// holdEarly works out the hold-back of a batch just claimed, while the batch
// before it (inflight) may still be published, so that the publisher does
// not wait for it. On an error the batch is left to publishBatch, which asks
// again. whole is HoldParams.Whole.
func (r *Relay) holdEarly(ctx context.Context, b *batch, inflight []Message, whole bool) {
	if _, ok := r.store.(outboxdriver.KeyOrderer); !ok || !anyKey(b.msgs) {
		return
	}
	if held, err := r.holdBack(ctx, *b, inflight, whole); err == nil {
		b.early, b.held = true, held
		r.noteHeld(held)
	}
}

// noteHeld makes the relay claim from the first id next when at least half
// of a batch is held back (held, one entry per message), instead of past
// the batch: the rows after it are most likely held behind the same
// blockers, which another relay's claim holds, while the held rows come due
// as soon as those are marked.
func (r *Relay) noteHeld(held []bool) {
	n := 0
	for _, h := range held {
		if h {
			n++
		}
	}
	if n > 0 && 2*n >= len(held) {
		r.rescanNext()
	}
}

// maxKeysDone bounds how many keys' done ids (Relay.keysDone) a relay keeps;
// past it, it forgets them all and starts again.
const maxKeysDone = 1 << 16

// noteKeysDone records, for each key of msgs, the highest id that went SENT
// or DEAD (outcomes, one per message, of a batch whose mark succeeded).
// Every message the relay publishes passed its key's check (publishBatch),
// so no other message of the key below that id was NEW then, and one that
// goes back to NEW later does so through a retry or a requeue.
func (r *Relay) noteKeysDone(msgs []Message, outcomes []Outcome) {
	if _, ok := r.store.(outboxdriver.KeyOrderer); !ok || !anyKey(msgs) {
		return
	}
	r.keysMu.Lock()
	defer r.keysMu.Unlock()
	if r.keysDone == nil || len(r.keysDone) > maxKeysDone {
		r.keysDone = make(map[string]int64)
	}
	for i, m := range msgs {
		if m.Key == "" || i >= len(outcomes) {
			continue
		}
		if k := outcomes[i].Kind; (k == OutcomeSent || k == OutcomeDead) && m.ID > r.keysDone[m.Key] {
			r.keysDone[m.Key] = m.ID
		}
	}
}

// keysDoneFor returns the done ids of msgs' keys (HoldParams.Done), or nil.
func (r *Relay) keysDoneFor(msgs []Message) map[string]int64 {
	r.keysMu.Lock()
	defer r.keysMu.Unlock()
	if len(r.keysDone) == 0 {
		return nil
	}
	var done map[string]int64
	for i := range msgs {
		if id, ok := r.keysDone[msgs[i].Key]; ok && msgs[i].Key != "" {
			if done == nil {
				done = make(map[string]int64)
			}
			done[msgs[i].Key] = id
		}
	}
	return done
}

// failedKeys returns, per key of b's messages that did not go (retried,
// released, DEAD with StopKeyAtDead, or all of them when the mark failed),
// the smallest such id: the batch claimed after b, whose hold-back did not
// count b's messages, holds back its later messages of those keys.
func (r *Relay) failedKeys(b batch, outcomes []Outcome, markErr error) map[string]int64 {
	var failed map[string]int64
	for i, m := range b.msgs {
		if m.Key == "" {
			continue
		}
		if markErr == nil && i < len(outcomes) {
			switch k := outcomes[i].Kind; {
			case k == OutcomeSent, k == OutcomeDead && !r.cfg.StopKeyAtDead:
				continue
			}
		}
		if failed == nil {
			failed = map[string]int64{}
		}
		if f, ok := failed[m.Key]; !ok || m.ID < f {
			failed[m.Key] = m.ID
		}
	}
	return failed
}

// heldBehind adds to held (which may be nil) the messages behind a failed
// message of their key in the batch before (failed, from failedKeys).
func heldBehind(failed map[string]int64, msgs []Message, held []bool) []bool {
	for i, m := range msgs {
		if f, ok := failed[m.Key]; ok && m.Key != "" && f < m.ID {
			if held == nil {
				held = make([]bool, len(msgs))
			}
			held[i] = true
		}
	}
	return held
}

func anyKey(msgs []Message) bool {
	for i := range msgs {
		if msgs[i].Key != "" {
			return true
		}
	}
	return false
}

// publishOrdered is publishBatch for a batch some of whose messages are held
// back behind an earlier message of their key: they are released unpublished
// (OutcomeRelease, Err ErrHeldBack), and the others published as usual.
func (r *Relay) publishOrdered(ctx context.Context, b batch, held []bool) (BatchReport, []Outcome, judgement) {
	var keep []int
	for i := range b.msgs {
		if !held[i] {
			keep = append(keep, i)
		}
	}
	var rep BatchReport
	var outs []Outcome
	j := judgement{charge: -1}
	if len(keep) > 0 {
		sub := b
		sub.heldBack = len(b.msgs) - len(keep)
		sub.msgs = make([]Message, len(keep))
		for k, i := range keep {
			sub.msgs[k] = b.msgs[i]
		}
		rep, outs, j = r.publishClaimed(ctx, sub)
	} else {
		rep = BatchReport{fromCursor: b.fromCursor, ClaimDuration: b.claimTook}
	}
	full := make([]Outcome, len(b.msgs))
	results := make([]MessageResult, len(b.msgs))
	k := 0
	for i, m := range b.msgs {
		if held[i] {
			full[i] = Outcome{Kind: OutcomeRelease}
			results[i] = MessageResult{Message: m, Outcome: full[i], Err: ErrHeldBack}
			rep.Released++
			rep.HeldBack++
			continue
		}
		full[i], results[i] = outs[k], rep.Results[k]
		k++
	}
	rep.Results = results
	return rep, full, j
}

// publishBatch publishes a claimed batch, first holding back the messages
// that must wait for an earlier message of their key (see KeyOrderer).
func (r *Relay) publishBatch(ctx context.Context, b batch) (BatchReport, []Outcome, judgement) {
	if b.early {
		if held := heldBehind(b.failedBefore, b.msgs, b.held); held != nil {
			r.noteHeld(held)
			return r.publishOrdered(ctx, b, held)
		}
		return r.publishClaimed(ctx, b)
	}
	held, err := r.holdBack(ctx, b, nil, false)
	if err != nil {
		r.noteDB(err)
		r.cfg.Logger.Warn("outbox relay: could not check the order of the batch's keys; its messages with a key wait", "error", err)
	}
	if held == nil {
		return r.publishClaimed(ctx, b)
	}
	r.noteHeld(held)
	return r.publishOrdered(ctx, b, held)
}

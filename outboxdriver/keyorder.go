package outboxdriver

import (
	"context"
	"time"
)

// KeyOrderer is implemented by a Store that keeps the messages of one key in
// id order across batches and relays. outbox.Relay calls HoldBack for every batch
// that has a message with a key, before it publishes it: as soon as it is
// claimed, while the batch before it may still be published
// (HoldParams.InFlight), or after the batch before it is marked. A Store
// that does not implement it keeps a key's order only inside one batch.
type KeyOrderer interface {
	// HoldBack reports, one entry per message of msgs (a claim's messages,
	// in id order), whether it must wait: an earlier message of its key
	// (smaller id) that is not in msgs is still NEW, or, with p.DeadBlocks,
	// DEAD. Messages without a key are never held. Each held message is
	// left NEW with its retry count unchanged, and its next_retry_at moved
	// so that rescans do not claim it again before its blocker can go:
	// behind a blocker waiting out a backoff, p.HeldWait from now (the
	// store makes it due at once when it marks the blocker SENT or DEAD);
	// behind a DEAD blocker, p.DeadWait from now; behind a blocker due now
	// (in another claim), the blocker's. held is nil when no message is
	// held.
	HoldBack(ctx context.Context, msgs []Message, p HoldParams) (held []bool, err error)
}

// HoldParams says what holds a keyed message back.
type HoldParams struct {
	// DeadBlocks: a DEAD message holds back the later messages of its key
	// (outbox.RelayConfig.StopKeyAtDead).
	DeadBlocks bool
	// DeadWait is how long a message held behind a DEAD one waits before it
	// is looked at again.
	DeadWait time.Duration
	// HeldWait is how long a message held behind one that waits out a
	// backoff waits before it is looked at again. The store makes it due
	// at once when its blocker is marked SENT or DEAD.
	HeldWait time.Duration
	// InFlight are the messages of the relay's previous claim, which it may
	// still be publishing: they hold back none of msgs. The relay holds
	// back, itself, the later messages of a key whose message there fails.
	InFlight []Message
	// Done gives, for some keys of msgs, an id below which the key has no
	// NEW message other than one that went back to NEW through a retry or
	// a requeue (next_retry_at past created_at): the relay published that
	// id after its own check and saw it SENT or DEAD. The store need not
	// look below it for any other NEW row of the key. Nil for none.
	Done map[string]int64
	// Whole: the relay vouches that every NEW row with an id below the
	// highest of msgs is one of msgs or of InFlight, or went back to NEW
	// through a retry or a requeue (next_retry_at past created_at). The
	// store need then look only at such requeued rows, and DEAD ones with
	// DeadBlocks. The relay sets it only for claims that report where
	// they began (ClaimSpan).
	Whole bool
}

// ClaimSpan is implemented by a Claim that can tell where its span of ids
// begins. The relay uses it to skip the per-key checks of HoldBack
// (HoldParams.Whole) while its claims hold every id of the span.
type ClaimSpan interface {
	// SpanFrom returns the id the claim started after, and ok. For a claim
	// from the first id (ClaimParams.AfterID 0) it is the store's low-water
	// mark: every NEW row at or below it went back to NEW through a retry
	// or a requeue. ok is false when the store cannot tell.
	SpanFrom() (from int64, ok bool)
}

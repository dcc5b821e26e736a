package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/outbox-go/outbox/internal/redact"

	"github.com/outbox-go/outbox/outboxdriver"
)

// Relay moves messages from the outbox table to a Publisher: it claims a batch,
// publishes it, and records the outcome of every message in one transaction.
// Several relays, in one process or many, may run against one table.
type Relay struct {
	store outboxdriver.Claimer
	pub   Publisher
	cfg   RelayConfig
	hooks []BatchHook
	wake  chan struct{}
	scale batchScale
	// health decides how much each batch attempts and tells an outage from
	// a poison message.
	health *health

	mu  sync.Mutex
	rnd *rand.Rand

	// pubMu keeps Publish calls one at a time (the CDC relay publishes from
	// its stream and its sweep); cdc is the CDC relay's state (cdcState).
	pubMu sync.Mutex
	cdc   atomic.Int32

	// dbErr is the error of the last claim or mark, cleared by the next
	// that succeeds; dbSince is when the failures began.
	statusMu sync.Mutex
	dbErr    error
	dbSince  time.Time

	// cursor is the last id of the previous full batch: the next claim starts
	// after it, until rescanAt, or until a batch comes back short. rescan
	// asks the next claim to start from the first id (rescanNext).
	cursorMu sync.Mutex
	cursor   int64
	rescan   bool
	rescanAt time.Time

	// keysDone holds, per key, the highest id of the key the relay saw SENT
	// or DEAD (noteKeysDone).
	keysMu   sync.Mutex
	keysDone map[string]int64
}

// NewRelay returns a Relay that moves messages from store, a driver, to pub.
// The relay also uses the optional interfaces of package outboxdriver that
// store implements (ClaimOverlapper, DueChecker, Watcher, KeyOrderer, and
// for RelayConfig.CDC Streamer and IDClaimer).
func NewRelay(store outboxdriver.Claimer, pub Publisher, cfg RelayConfig) (*Relay, error) {
	if store == nil || pub == nil {
		return nil, errors.New("outbox: NewRelay: store and publisher are required")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := cfg.validateCDC(store); err != nil {
		return nil, err
	}
	r := &Relay{store: store, pub: pub, cfg: cfg, wake: make(chan struct{}, 1), health: newHealth(cfg.BatchSize),
		rnd: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), hooks: hooksOf[BatchHook](cfg.Hooks)}
	return r, nil
}

// RelayStatus is what a relay knows of its broker and database at one
// moment, for a readiness probe or an operator.
type RelayStatus struct {
	// Outage is set while the relay holds the broker for down: it pauses
	// and probes one message every ProbeInterval. OutageSince is when the
	// outage began, and OutageError the error that revealed it.
	Outage      bool
	OutageSince time.Time
	OutageError error
	// DatabaseError is the error of the last claim or mark while they keep
	// failing (nil once one succeeds), and DatabaseErrorSince when the
	// failures began.
	DatabaseError      error
	DatabaseErrorSince time.Time
}

// Ready reports whether the relay can do its work: no outage and no
// failing database.
func (s RelayStatus) Ready() bool { return !s.Outage && s.DatabaseError == nil }

// Status returns the relay's status now. It is safe to call at any time,
// from any goroutine.
func (r *Relay) Status() RelayStatus {
	var st RelayStatus
	st.Outage, st.OutageSince, st.OutageError = r.health.outage()
	r.statusMu.Lock()
	st.DatabaseError, st.DatabaseErrorSince = r.dbErr, r.dbSince
	r.statusMu.Unlock()
	return st
}

// noteDB records the outcome of a claim or a mark for Status.
func (r *Relay) noteDB(err error) {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	switch {
	case err == nil:
		r.dbErr = nil
	case r.dbErr == nil:
		r.dbErr, r.dbSince = err, time.Now()
	default:
		r.dbErr = err
	}
}

// Config returns the relay's configuration with defaults applied.
func (r *Relay) Config() RelayConfig { return r.cfg }

// Wake makes a waiting relay look for messages at once (for example on a
// database notification). It never blocks.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// BatchReport tells what one batch did.
type BatchReport struct {
	// Results holds one entry per claimed message, in id order.
	Results []MessageResult
	Sent    int
	Retried int
	Dead    int
	// Released counts messages left untouched: the broker was unreachable, or
	// the message was held back behind an earlier one of its key.
	Released int
	// HeldBack counts the released messages that waited for an earlier
	// message of their key outside the batch (see outboxdriver.KeyOrderer).
	HeldBack int
	// Duration is the time from claim to finished mark.
	Duration time.Duration
	// ClaimDuration, PublishDuration and MarkDuration are the parts of
	// Duration spent in the store's Claim, the publisher's Publish and the
	// mark (the claim's Finish). What is left of Duration is the time the
	// batch waited for the batch before it: summed over a run, they tell
	// whether the database or the broker sets the pace.
	ClaimDuration, PublishDuration, MarkDuration time.Duration

	// Outage is set when the relay took the batch's failures for an outage
	// of the broker (unreachable, or many messages refused alike): it then
	// pauses, probing one message every ProbeInterval, and spends no
	// retries.
	Outage error

	// fromCursor: the claim started past the previous batch, so a short
	// batch does not prove that nothing is due below it.
	fromCursor bool
}

// MessageResult is the outcome of one message in a batch.
type MessageResult struct {
	Message Message
	Outcome Outcome
	// Err is the publisher's error (nil when sent).
	Err error
}

// RunOnce claims, publishes and marks one batch. An empty report means nothing
// was due. Once a batch is claimed, cancelling ctx no longer interrupts it: it
// is published and marked within PublishTimeout, so that a stopping relay
// leaves nothing half done.
func (r *Relay) RunOnce(ctx context.Context) (BatchReport, error) {
	b, err := r.claimBatch(ctx, nil)
	if err != nil {
		return BatchReport{}, err
	}
	if len(b.msgs) == 0 {
		return BatchReport{fromCursor: b.fromCursor}, b.claim.Finish(context.WithoutCancel(ctx), nil)
	}
	return r.deliver(ctx, b)
}

// batch is one claim on its way through the relay.
type batch struct {
	claim      outboxdriver.Claim
	msgs       []Message
	limit      int // the claim's limit
	start      time.Time
	claimTook  time.Duration // how long the store's Claim took
	fromCursor bool
	// heldBack counts the claimed messages held back behind an earlier
	// message of their key (see outboxdriver.KeyOrderer): they are not in msgs.
	heldBack int
	// handled, when set (OverlapNone), is closed once the batch is marked or
	// released.
	handled chan struct{}
	// early: the hold-back was worked out when the batch was claimed (held),
	// without the messages of the batch before it, whose failed keys
	// (failedBefore) the publisher adds.
	early        bool
	held         []bool
	failedBefore map[string]int64
}

// claimBatch claims the next batch, from the cursor or from the first id;
// prev is the claim before it, which the publisher may still hold, or nil.
func (r *Relay) claimBatch(ctx context.Context, prev outboxdriver.Claim) (batch, error) {
	start := time.Now()
	after := r.claimFrom(start)
	limit := r.scaledLimit(r.health.claimLimit())
	claim, err := r.store.Claim(ctx, outboxdriver.ClaimParams{Limit: limit, AfterID: after, Lease: r.cfg.Lease, Prev: prev})
	if ctx.Err() == nil {
		r.noteDB(err)
	}
	if err != nil {
		r.moveCursor(0)
		return batch{}, fmt.Errorf("claim: %w", err)
	}
	took := time.Since(start)
	msgs := claim.Messages()
	r.noteBatch(len(msgs), limit)
	if len(msgs) == limit {
		r.moveCursor(msgs[len(msgs)-1].ID)
	} else {
		r.moveCursor(0)
	}
	return batch{claim: claim, msgs: msgs, limit: limit, start: start, claimTook: took, fromCursor: after > 0}, nil
}

// publishWindow is how long batch b may publish from now: PublishTimeout,
// or less for a batch that waited behind the previous one, so that its
// publish ends early enough in the claim's lease for the mark to follow
// within it. The mark is given half of what the
// lease holds beyond PublishTimeout (15 s by default); past its lease the
// batch could be claimed by another relay and published twice.
func (r *Relay) publishWindow(b batch) time.Duration {
	markReserve := (r.cfg.Lease - r.cfg.PublishTimeout) / 2
	return min(r.cfg.PublishTimeout, time.Until(b.start.Add(r.cfg.Lease))-markReserve)
}

// deliver publishes a claimed batch and records every message's outcome.
// From here on the batch is the relay's: it is finished even if ctx is
// cancelled.
func (r *Relay) deliver(ctx context.Context, b batch) (BatchReport, error) {
	rep, outcomes, _ := r.publishBatch(ctx, b)
	return r.finishBatch(ctx, b, rep, outcomes)
}

// publishClaimed publishes a claimed batch as the relay's health plan says
// and decides every message's outcome: the messages the plan leaves out are
// released untouched.
func (r *Relay) publishClaimed(ctx context.Context, b batch) (BatchReport, []Outcome, judgement) {
	msgs := b.msgs
	pl := r.health.plan(msgs)
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.publishWindow(b))
	pstart := time.Now()
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = errNotAttempted
	}
	first := r.publishSome(pctx, msgs, pl.first, errs)
	var last *batchResult
	if pl.last >= 0 && clean(first) {
		last = &r.publishSome(pctx, msgs, []int{pl.last}, errs)[0]
	}
	took := time.Since(pstart)
	cancel()
	j := r.health.judge(msgs, pl, first, last, r.cfg.BatchSize, b.heldBack)

	rep := BatchReport{Results: make([]MessageResult, len(msgs)), fromCursor: b.fromCursor,
		ClaimDuration: b.claimTook, PublishDuration: took}
	if j.verdict == outage {
		rep.Outage = j.reason
	}
	outcomes := make([]Outcome, len(msgs))
	for i, m := range msgs {
		perr := errs[i]
		var o Outcome
		switch {
		case errors.Is(perr, errNotAttempted):
			o = Outcome{Kind: OutcomeRelease}
		case i == j.charge:
			perr = chargeError(perr, j.alone)
			o = r.refusal(m, perr)
		case j.releaseRefused && perr != nil && !IsUnavailable(perr) && !IsUndeliverable(perr) && !errors.Is(perr, ErrHeldBack):
			o = Outcome{Kind: OutcomeRelease}
		default:
			o = r.outcome(m, perr)
		}
		if errors.Is(perr, errNotAttempted) {
			perr = nil
		}
		outcomes[i] = o
		rep.Results[i] = MessageResult{Message: m, Outcome: o, Err: perr}
		switch o.Kind {
		case OutcomeSent:
			rep.Sent++
		case OutcomeRetry:
			rep.Retried++
		case OutcomeDead:
			rep.Dead++
		case OutcomeRelease:
			rep.Released++
		}
	}
	return rep, outcomes, j
}

// errNotAttempted marks a message the plan left out of the publish.
var errNotAttempted = errors.New("outbox: not attempted")

// publishSome publishes msgs[idx...] in one call, records each error in
// errs and returns the results.
func (r *Relay) publishSome(ctx context.Context, msgs []Message, idx []int, errs []error) []batchResult {
	if len(idx) == 0 {
		return nil
	}
	// The plan keeps id order, so a plan of every message is msgs itself:
	// the common batch publishes without a copy.
	sub := msgs
	if len(idx) != len(msgs) {
		sub = make([]Message, len(idx))
		for k, i := range idx {
			sub[k] = msgs[i]
		}
	}
	got := r.publish(ctx, sub)
	out := make([]batchResult, len(idx))
	for k, i := range idx {
		var err error
		if got != nil {
			err = got[k]
		}
		errs[i] = err
		out[k] = batchResult{idx: i, err: err}
	}
	return out
}

// clean reports whether results hold a message sent and none unavailable.
func clean(results []batchResult) bool {
	sent := false
	for _, res := range results {
		if IsUnavailable(res.err) {
			return false
		}
		sent = sent || res.err == nil
	}
	return sent
}

// finishBatch records the outcomes of a published batch in one transaction,
// then logs the messages that went DEAD and calls the hooks.
func (r *Relay) finishBatch(ctx context.Context, b batch, rep BatchReport, outcomes []Outcome) (BatchReport, error) {
	bctx := context.WithoutCancel(ctx)
	fctx, cancel := context.WithTimeout(bctx, r.cfg.PublishTimeout)
	defer cancel()
	mstart := time.Now()
	err := b.claim.Finish(fctx, outcomes)
	r.noteDB(err)
	if err != nil {
		// The claim is void: the rows stay NEW and will be published again; the
		// consumers' inbox absorbs the duplicates.
		return rep, fmt.Errorf("mark batch of %d: %w", len(b.msgs), err)
	}
	rep.MarkDuration = time.Since(mstart)
	rep.Duration = time.Since(b.start)
	r.noteKeysDone(b.msgs, outcomes)
	for _, res := range rep.Results {
		if res.Outcome.Kind == OutcomeDead {
			r.cfg.Logger.Error("outbox relay: message is DEAD after its last retry; inspect with `outbox dead show`",
				"msg_id", res.Message.MsgID, "topic", res.Message.Topic, "retries", res.Message.Retries+1, "error", res.Outcome.Error)
		}
	}
	for _, h := range r.hooks {
		h.OnBatch(bctx, rep)
	}
	return rep, nil
}

// claimFrom returns the AfterID of the next claim: the cursor, or 0 when the
// relay is due to claim from the first id again.
func (r *Relay) claimFrom(now time.Time) int64 {
	r.cursorMu.Lock()
	defer r.cursorMu.Unlock()
	if r.cursor == 0 || r.rescan || !now.Before(r.rescanAt) {
		r.cursor, r.rescan = 0, false
		r.rescanAt = now.Add(r.cfg.RescanInterval)
	}
	return r.cursor
}

// rescanNext makes the next claim start from the first id, even if a claim
// under way moves the cursor before it.
func (r *Relay) rescanNext() {
	r.cursorMu.Lock()
	r.cursor, r.rescan = 0, true
	r.cursorMu.Unlock()
}

func (r *Relay) moveCursor(id int64) {
	r.cursorMu.Lock()
	r.cursor = id
	r.cursorMu.Unlock()
}

// publish calls the publisher and makes sure its answer has one entry per
// message; a publisher that breaks that contract has every message released.
func (r *Relay) publish(ctx context.Context, msgs []Message) (errs []error) {
	defer func() {
		if p := recover(); p != nil {
			err := Unavailable(fmt.Errorf("publisher panicked: %v", p))
			errs = make([]error, len(msgs))
			for i := range errs {
				errs[i] = err
			}
		}
	}()
	r.pubMu.Lock()
	defer r.pubMu.Unlock()
	errs = r.pub.Publish(ctx, msgs)
	if errs != nil && len(errs) != len(msgs) {
		err := Unavailable(fmt.Errorf("publisher returned %d results for %d messages", len(errs), len(msgs)))
		errs = make([]error, len(msgs))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

func (r *Relay) outcome(m Message, err error) Outcome {
	switch {
	case err == nil:
		return Outcome{Kind: OutcomeSent}
	case IsUnavailable(err), errors.Is(err, ErrHeldBack):
		return Outcome{Kind: OutcomeRelease}
	case IsUndeliverable(err):
		return Outcome{Kind: OutcomeDead, Error: errorText(err)}
	}
	return r.refusal(m, err)
}

// refusal is the outcome of a refused attempt: a retry after the backoff,
// or DEAD once the message has spent MaxRetries and RetryBudget.
func (r *Relay) refusal(m Message, err error) Outcome {
	text := errorText(err)
	if m.Retries+1 >= r.cfg.MaxRetries && !r.withinBudget(m) {
		return Outcome{Kind: OutcomeDead, Error: text}
	}
	return Outcome{Kind: OutcomeRetry, Error: text, Delay: r.backoff(m.Retries)}
}

// withinBudget reports whether m was written less than RetryBudget ago.
func (r *Relay) withinBudget(m Message) bool {
	return r.cfg.RetryBudget > 0 && !m.CreatedAt.IsZero() && time.Since(m.CreatedAt) < r.cfg.RetryBudget
}

// maxErrorText is the most of an error's text a row keeps in last_error.
const maxErrorText = 2000

// errorText returns err's text as last_error keeps it, with the credentials
// of any URL or DSN it quotes masked (see package redact): at most maxErrorText
// bytes, cut at a character boundary, valid UTF-8, and without NUL bytes,
// which PostgreSQL can store neither in text nor in jsonb. A publisher's
// error may quote whatever the broker sent; were the text not storable, the
// mark would fail and the whole batch would be published again, over and
// over.
func errorText(err error) string {
	text := strings.ToValidUTF8(redact.Text(err.Error()), "\uFFFD")
	text = strings.ReplaceAll(text, "\x00", "\uFFFD")
	if len(text) > maxErrorText {
		cut := maxErrorText
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut]
	}
	return text
}

// backoff returns the delay after failure number attempt+1: RetryBase doubled
// per earlier failure, capped at RetryMax, with "equal jitter" (half fixed, half
// random) so that a burst of failures does not come back as a burst.
func (r *Relay) backoff(attempt int) time.Duration {
	d := r.cfg.RetryMax
	if attempt < 62 {
		if b := r.cfg.RetryBase << attempt; b > 0 && b < d {
			d = b
		}
	}
	if d <= 1 {
		return d
	}
	r.mu.Lock()
	j := time.Duration(r.rnd.Int64N(int64(d/2) + 1))
	r.mu.Unlock()
	return d/2 + j
}

package outbox

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/outbox-go/outbox/internal/errsig"
)

// outageStreak is how many different messages in a row, with none sent in
// between, must be refused alike before the relay takes the refusals for an
// outage of the broker.
const outageStreak = 10

// outageKeys is how many different keys the messages of a streak must have
// for the messages held back behind them by per-key order (see outboxdriver.KeyOrderer)
// to count towards outageStreak: held messages could not be tried, and
// every message that could was refused alike. A streak of fewer keys stays
// each message's own refusal, so a single poison message at the head of a
// key is charged and goes DEAD in time.
const outageKeys = 3

// maxTracked bounds each set of message ids the health state remembers; a
// set that grows past it starts again empty.
const maxTracked = 4096

// health is what the relay has learnt of the broker from the batches it
// published: how many messages the next batch may attempt, which message is
// suspected of breaking the connection, and whether the broker is down.
// Relay.publishBatch consults it before a publish (plan) and feeds it every
// result (judge). All of it is in memory: a restarted relay starts afresh,
// which costs at most one more round of narrowing.
type health struct {
	mu sync.Mutex
	// limit is the most messages the next batch attempts: BatchSize, halved
	// after a batch that broke off part way as unavailable, doubled after
	// one that went through, 1 during an outage.
	limit int
	// suspect failed as unavailable when it was published alone; the next
	// batch publishes others first, and the suspect alone after them.
	suspect int64
	// poison holds messages charged for breaking the connection: each is
	// published alone, after the rest of its batch, for as long as it lives.
	poison map[int64]struct{}
	// open: an outage. The relay pauses between probes of one message and
	// spends no retries.
	open      bool
	openSince time.Time
	openErr   error
	probes    int
	// streak holds the messages refused alike (signature streakSig), with
	// none sent since the first of them.
	streakSig string
	streak    map[int64]struct{}
	// streakKeys are the keys of the streak's messages, and streakHeld
	// counts the messages held back behind them in the streak's batches.
	streakKeys map[string]struct{}
	streakHeld int
	// refusers were refused while other messages went through: their
	// refusals are their own, never evidence of an outage.
	refusers map[int64]struct{}
}

func newHealth(limit int) *health {
	h := &health{limit: limit, poison: map[int64]struct{}{}, refusers: map[int64]struct{}{}}
	h.resetStreak("")
	return h
}

// resetStreak starts a new streak of refusals with signature sig.
func (h *health) resetStreak(sig string) {
	h.streakSig, h.streak, h.streakKeys, h.streakHeld = sig, map[int64]struct{}{}, map[string]struct{}{}, 0
}

// outageShown: the streak is long enough to be an outage, counting the
// messages held back behind it when it spans outageKeys keys.
func (h *health) outageShown() bool {
	n := len(h.streak)
	if len(h.streakKeys) >= outageKeys {
		n += h.streakHeld
	}
	return n >= outageStreak
}

// plan is how one batch is published: first, in one Publish call; then, when
// first went through without an unavailable error, alone the message at last
// (-1 for none). Messages in neither are released untouched.
type plan struct {
	first []int
	last  int
	// control: the batch leaves the suspect out, to see whether others go
	// through.
	control bool
}

// plan decides which of msgs the batch attempts.
func (h *health) plan(msgs []Message) plan {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := plan{last: -1}
	limit := h.limit
	if h.open {
		limit = 1
	}
	held := map[string]bool{} // keys whose earlier message is set aside
	var setAside []int
	for i, m := range msgs {
		if m.Key != "" && held[m.Key] {
			continue
		}
		isolate := m.ID == h.suspect
		if _, ok := h.poison[m.ID]; ok {
			isolate = true
		}
		// A probe prefers a message that has not failed yet: one that has
		// may be the only thing wrong.
		_, streaked := h.streak[m.ID]
		if isolate || (h.open && streaked) {
			setAside = append(setAside, i)
			if m.Key != "" {
				held[m.Key] = true
			}
			continue
		}
		if len(p.first) < limit {
			p.first = append(p.first, i)
		}
	}
	if len(setAside) == 0 {
		return p
	}
	lone := setAside[0]
	if len(p.first) == 0 {
		// Nothing else is due: the set-aside message goes alone.
		p.first = []int{lone}
		return p
	}
	_, poisoned := h.poison[msgs[lone].ID]
	if !h.open && (poisoned || msgs[lone].ID == h.suspect) {
		p.last = lone
		p.control = msgs[lone].ID == h.suspect
	}
	return p
}

// verdict is what the relay does after a batch.
type verdict int

const (
	// goOn: nothing to wait for.
	goOn verdict = iota
	// narrow: a batch broke off as unavailable; the next, smaller one
	// follows after a short pause.
	narrow
	// outage: the broker is down; the relay probes every ProbeInterval.
	outage
)

// narrowPause is the pause before the next, smaller batch of a narrowing.
const narrowPause = 20 * time.Millisecond

// batchResult is one attempted message's result, as judge reads it.
type batchResult struct {
	idx int
	err error
}

// judgement is judge's answer for one batch.
type judgement struct {
	verdict verdict
	// charge: the message at this index broke the connection while the
	// others went through, or (alone) failed as unavailable again with
	// nothing else due; its unavailable error is a refusal of its own.
	charge int
	alone  bool
	// releaseRefused: the refusals were an outage; they spend no retries.
	releaseRefused bool
	// reason is the error the verdict rests on.
	reason error
	// reopened / closed tell the relay to log a change of state.
	opened, closed bool
	downFor        time.Duration
	probes         int
}

// judge updates the health state with a batch's results and says what the
// relay should do. first and last are the results of the plan's two parts
// (last is nil when it was not attempted).
func (h *health) judge(msgs []Message, p plan, first []batchResult, last *batchResult, batchSize, heldBack int) judgement {
	h.mu.Lock()
	defer h.mu.Unlock()
	j := judgement{charge: -1}
	var t tally
	for _, r := range first {
		t.count(r)
	}
	if last != nil {
		h.judgeLast(msgs, *last, &t, &j)
	}
	if t.sent > 0 {
		h.delivered(msgs, t.refused, &j)
	}

	switch {
	case t.unavailable > 0:
		j.reason = t.firstUnavailable
		j.verdict = h.judgeUnavailable(msgs, p, first, t.sent, &j)
		return j
	case t.sent > 0:
		h.limit = min(batchSize, max(1, h.limit)*2)
		return j
	case len(t.refused) == 0:
		return j
	}
	h.judgeRefusals(msgs, t.refused, heldBack+t.held, &j)
	return j
}

// tally counts a batch's results by kind.
type tally struct {
	sent, unavailable, held int
	refused                 []batchResult
	firstUnavailable        error
}

// count adds r to the tally.
func (t *tally) count(r batchResult) {
	switch {
	case r.err == nil:
		t.sent++
	case IsUnavailable(r.err):
		t.unavailable++
		if t.firstUnavailable == nil {
			t.firstUnavailable = r.err
		}
	case isHeldBack(r.err):
		t.held++
	case IsUndeliverable(r.err):
	default:
		t.refused = append(t.refused, r)
	}
}

// judgeLast judges the result of the plan's last part, the suspect tried
// after the others, with t holding the first part's results.
func (h *health) judgeLast(msgs []Message, last batchResult, t *tally, j *judgement) {
	m := msgs[last.idx]
	switch {
	case last.err == nil:
		delete(h.poison, m.ID)
		if h.suspect == m.ID {
			h.suspect = 0
		}
		t.sent++
	case IsUnavailable(last.err) && t.sent > 0 && t.unavailable == 0:
		// The others went through, and this one broke the connection:
		// it is the message, not the broker.
		j.charge = last.idx
		track(h.poison, m.ID)
		if h.suspect == m.ID {
			h.suspect = 0
		}
	default:
		// Refused, or undeliverable: whatever it is, it did not break
		// the connection.
		if h.suspect == m.ID {
			h.suspect = 0
		}
		t.count(last)
	}
}

// delivered records that messages went through: an open outage closes,
// and the refusals beside them are their messages' own.
func (h *health) delivered(msgs []Message, refused []batchResult, j *judgement) {
	if h.open {
		j.closed, j.downFor, j.probes = true, time.Since(h.openSince), h.probes
		h.open, h.probes = false, 0
	}
	// Refused while others went through: those refusals are their own.
	for _, r := range refused {
		track(h.refusers, msgs[r.idx].ID)
	}
	h.resetStreak("")
}

// judgeUnavailable returns the verdict on a batch in which messages failed
// as unavailable, sent of them having gone through.
func (h *health) judgeUnavailable(msgs []Message, p plan, first []batchResult, sent int, j *judgement) verdict {
	u := firstUnavailableID(msgs, first)
	switch {
	case h.open:
		h.probes++
		if len(first) == 1 && (isIn(h.poison, u) || u == h.suspect) {
			// Nothing but a suspect is due: charged, or the outage
			// could last as long as it does.
			j.charge, j.alone = first[0].idx, true
			track(h.poison, u)
			h.suspect = 0
		}
		return outage
	case sent > 0:
		// The batch broke off part way: the first message it could not
		// publish is suspected, and goes alone after the others next
		// time.
		h.suspect = u
		h.limit = max(1, len(first)/2)
		return narrow
	case p.control:
		// The suspect was left out and the others failed too: the
		// broker is down, not the suspect's fault.
		h.suspect = 0
		return h.openOutage(j)
	case len(first) > 1:
		// Nothing went through: half as many next time, until one
		// message alone tells whether it is the message or the broker.
		h.limit = max(1, len(first)/2)
		return narrow
	case isIn(h.poison, u), u == h.suspect:
		// Alone again, with nothing else due to tell it from an outage:
		// the message is charged (its retry budget keeps it alive
		// through a real outage), and tried after the others once
		// others come.
		j.charge, j.alone = first[0].idx, true
		track(h.poison, u)
		h.suspect = 0
		return goOn
	default:
		// One message alone failed: the next batch tells whether the
		// others go through without it.
		h.suspect = u
		return narrow
	}
}

// judgeRefusals judges a batch in which nothing went through and nothing
// was unavailable: are the refusals an outage (many messages refused
// alike) or refusals of their own? held counts the messages held back.
func (h *health) judgeRefusals(msgs []Message, refused []batchResult, held int, j *judgement) {
	sig := ""
	for i, r := range refused {
		s := errorSignature(msgs[r.idx], r.err)
		if i > 0 && s != sig {
			h.resetStreak("")
			return // refused differently: each message's own
		}
		sig = s
	}
	if sig != h.streakSig {
		h.resetStreak(sig)
	}
	for _, r := range refused {
		if _, own := h.refusers[msgs[r.idx].ID]; !own {
			track(h.streak, msgs[r.idx].ID)
			if k := msgs[r.idx].Key; k != "" && len(h.streakKeys) < maxTracked {
				h.streakKeys[k] = struct{}{}
			}
		}
	}
	h.streakHeld += held
	if h.open || h.outageShown() {
		j.reason = refused[0].err
		j.releaseRefused = true
		if h.open {
			h.probes++
			j.verdict = outage
		} else {
			j.verdict = h.openOutage(j)
		}
	}
}

// firstUnavailableID is the id of the first message of results that failed
// as unavailable.
func firstUnavailableID(msgs []Message, results []batchResult) int64 {
	for _, r := range results {
		if IsUnavailable(r.err) {
			return msgs[r.idx].ID
		}
	}
	return 0
}

func (h *health) openOutage(j *judgement) verdict {
	h.open, h.openSince, h.openErr, h.probes = true, time.Now(), j.reason, 0
	h.limit = 1
	j.opened = true
	return outage
}

// claimLimit is the most messages the next claim should take.
func (h *health) claimLimit() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open {
		// A probe prefers a message that has not failed yet: claim a few
		// to choose from.
		return 1 + outageStreak
	}
	if h.suspect != 0 || len(h.poison) > 0 {
		return h.limit + 1
	}
	return h.limit
}

// outage reports whether the relay holds the broker for down, since when,
// and the error that made it so.
func (h *health) outage() (bool, time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open, h.openSince, h.openErr
}

func isIn(set map[int64]struct{}, id int64) bool {
	_, ok := set[id]
	return ok
}

func track(set map[int64]struct{}, id int64) {
	if len(set) >= maxTracked {
		clear(set)
	}
	set[id] = struct{}{}
}

func isHeldBack(err error) bool { return errors.Is(err, ErrHeldBack) }

// errorSignature is err's text with what belongs to message m (its msg_id,
// topic and key) and every run of digits taken out, so that two messages
// refused for the same reason give the same signature.
func errorSignature(m Message, err error) string {
	return errsig.Of(errorText(err), m.MsgID, m.Topic, m.Key)
}

// chargeError is the refusal recorded for a message charged for an
// unavailable error: it broke the connection while other messages went
// through, or it failed so again alone, with nothing else to publish.
func chargeError(err error, alone bool) error {
	if alone {
		return fmt.Errorf("publishing this message failed again with nothing else to publish (it broke the connection to the broker, or the broker is down); it is charged a retry: %w", err)
	}
	return fmt.Errorf("publishing this message broke the connection to the broker while other messages went through; it is charged a retry: %w", err)
}

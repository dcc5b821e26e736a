package outbox

import (
	"context"
	"fmt"
)

// KeyHold holds back, within one Publish call, the later messages of a key
// once one of its messages failed, so that none of them overtakes it. A
// publisher that sends a batch in order calls Held before it sends each
// message and Fail when one fails. The zero value holds nothing back; a
// KeyHold is not safe for concurrent use.
type KeyHold struct {
	failed map[string]keyFailure
}

type keyFailure struct {
	msgID       string
	unavailable bool
}

// Held returns the error of a message that must not be sent because an
// earlier message of its key failed: one that satisfies errors.Is(err,
// ErrHeldBack), and IsUnavailable when that failure did. It returns nil for
// a message without a key, or whose key has not failed.
func (h *KeyHold) Held(m *Message) error {
	if m.Key == "" {
		return nil
	}
	f, ok := h.failed[m.Key]
	switch {
	case !ok:
		return nil
	case f.unavailable:
		return Unavailable(fmt.Errorf("%w (msg_id %q could not be published)", ErrHeldBack, f.msgID))
	}
	return fmt.Errorf("%w (msg_id %q failed first)", ErrHeldBack, f.msgID)
}

// Fail records that m failed with err, so that Held holds back the later
// messages of its key. It does nothing when err is nil or m has no key; the
// first failure of a key is the one Held names.
func (h *KeyHold) Fail(m *Message, err error) {
	if err == nil || m.Key == "" {
		return
	}
	if _, ok := h.failed[m.Key]; ok {
		return
	}
	if h.failed == nil {
		h.failed = make(map[string]keyFailure)
	}
	h.failed[m.Key] = keyFailure{msgID: m.MsgID, unavailable: IsUnavailable(err)}
}

// KeyWaves splits msgs into waves in which no key appears twice: wave n
// holds, in batch order, the indexes of the n-th message of every key; the
// first wave also holds every message without a key. A batch in which no key
// appears twice is one wave.
func KeyWaves(msgs []Message) [][]int {
	var waves [][]int
	seen := make(map[string]int)
	for i := range msgs {
		n := 0
		if k := msgs[i].Key; k != "" {
			n = seen[k]
			seen[k] = n + 1
		}
		if n == len(waves) {
			waves = append(waves, nil)
		}
		waves[n] = append(waves[n], i)
	}
	return waves
}

// PublishWaves is Publish for a publisher that pipelines a batch to a broker
// that acknowledges each message on its own, so that a message refused after
// it was sent does not stop the later ones already on the wire (RabbitMQ
// publisher confirms, JetStream PubAcks, a Redis pipeline). It calls send
// with the waves of KeyWaves one after another, each wave whole (pipelined),
// the next after send returned: a key's next message is sent only once its
// previous one was acknowledged. A message whose key failed in an earlier
// wave is not sent; it gets KeyHold's error. Once a wave has a failure that
// satisfies IsUnavailable, or ctx has ended, the later waves are not sent
// and their messages are Unavailable.
//
// send returns one error per message, or nil when every message was
// acknowledged, as Publish does. The result is nil when every message was
// acknowledged.
func PublishWaves(ctx context.Context, msgs []Message, send func(ctx context.Context, msgs []Message) []error) []error {
	if len(msgs) == 0 {
		return nil
	}
	waves := KeyWaves(msgs)
	if len(waves) == 1 {
		return send(ctx, msgs)
	}
	errs := make([]error, len(msgs))
	var hold KeyHold
	var down error
	for _, wave := range waves {
		if down == nil && ctx.Err() != nil {
			down = Unavailable(context.Cause(ctx))
		}
		sub := make([]Message, 0, len(wave))
		idx := make([]int, 0, len(wave))
		for _, i := range wave {
			switch err := hold.Held(&msgs[i]); {
			case err != nil:
				errs[i] = err
			case down != nil:
				errs[i] = Unavailable(fmt.Errorf("outbox: not sent after an earlier failure of the batch: %w", down))
			default:
				sub = append(sub, msgs[i])
				idx = append(idx, i)
			}
		}
		if len(sub) == 0 {
			continue
		}
		got := send(ctx, sub)
		if got != nil && len(got) != len(sub) {
			err := Unavailable(fmt.Errorf("outbox: the publisher returned %d results for %d messages", len(got), len(sub)))
			got = make([]error, len(sub))
			for k := range got {
				got[k] = err
			}
		}
		for k, i := range idx {
			if got == nil || got[k] == nil {
				continue
			}
			errs[i] = got[k]
			hold.Fail(&msgs[i], got[k])
			if down == nil && IsUnavailable(got[k]) {
				down = got[k]
			}
		}
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

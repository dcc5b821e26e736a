package outbox

import (
	"context"
	"fmt"
)

// Publisher delivers a batch of messages to a broker or endpoint. The relay owns
// this interface; each broker adapter implements it.
//
// Publish returns one error per message, in order: nil means the broker
// acknowledged durable receipt of that message. A nil slice means every message
// was acknowledged. An error that satisfies IsUnavailable means the broker could
// not be reached: the relay leaves that message untouched and pauses; any other
// error counts as a refusal and spends one of the message's retries.
//
// Publish should send the whole batch before waiting for acknowledgements
// (pipelining), and must respect ctx's deadline. One Relay calls Publish for
// one batch at a time, in claim order; several relays may share a Publisher
// and call it at once. A Publisher that also
// implements io.Closer is closed by whoever built it, not by the relay.
type Publisher interface {
	Publish(ctx context.Context, msgs []Message) []error
}

// PublishFunc adapts a function that publishes one message to a Publisher. It
// publishes the batch one message at a time, in order: meant for library users
// that hand messages to in-process code, and for tests. Once a message with a
// key fails, the later messages of that key in the batch are not attempted:
// they get ErrHeldBack, so that they cannot overtake it.
type PublishFunc func(ctx context.Context, m Message) error

// Publish calls f for each message in order.
func (f PublishFunc) Publish(ctx context.Context, msgs []Message) []error {
	var errs []error
	var failedKeys map[string]string
	for i, m := range msgs {
		var err error
		if first, held := failedKeys[m.Key]; held && m.Key != "" {
			err = fmt.Errorf("%w (msg_id %q failed first)", ErrHeldBack, first)
		} else if err = f(ctx, m); err != nil && m.Key != "" {
			if failedKeys == nil {
				failedKeys = map[string]string{}
			}
			failedKeys[m.Key] = m.MsgID
		}
		if err != nil {
			if errs == nil {
				errs = make([]error, len(msgs))
			}
			errs[i] = err
		}
	}
	return errs
}

// BatchPublishFunc adapts a function with Publisher's signature.
type BatchPublishFunc func(ctx context.Context, msgs []Message) []error

// Publish calls f.
func (f BatchPublishFunc) Publish(ctx context.Context, msgs []Message) []error { return f(ctx, msgs) }

// Discard is a Publisher that acknowledges every message and sends nothing: for
// benchmarks of the relay itself (`--broker discard:`).
var Discard Publisher = discard{}

type discard struct{}

func (discard) Publish(context.Context, []Message) []error { return nil }

// GroupByKey returns the indexes of msgs grouped by Key, each group in batch
// order, the groups in the order of their first message; every message
// without a key is a group of its own. A publisher that sends groups in
// parallel and each group in order keeps per-key order, and can hold back
// the rest of a group after a failure (ErrHeldBack).
func GroupByKey(msgs []Message) [][]int {
	groups := make([][]int, 0, len(msgs))
	byKey := make(map[string]int)
	for i := range msgs {
		k := msgs[i].Key
		if k == "" {
			groups = append(groups, []int{i})
			continue
		}
		g, ok := byKey[k]
		if !ok {
			g = len(groups)
			byKey[k] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

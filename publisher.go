package outbox

import (
	"context"
	"sync"
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
	var hold KeyHold
	for i := range msgs {
		err := hold.Held(&msgs[i])
		if err == nil {
			err = f(ctx, msgs[i])
			hold.Fail(&msgs[i], err)
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
	return groupBy(len(msgs), func(i int) string { return msgs[i].Key })
}

func groupBy(n int, key func(i int) string) [][]int {
	groups := make([][]int, 0, n)
	byKey := make(map[string]int)
	for i := range n {
		k := key(i)
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

// GoByKey groups the indexes 0..n-1 by key(i) as GroupByKey does, calls fn
// for each group in a goroutine of its own, at most limit at once (at least
// one), and returns when every call has returned. fn gets a group's indexes
// in order and handles them one after another: the messages of one key are
// handled one at a time, in order, and different keys in parallel. It is
// the loop of PublishKeyGroups, and of a subscriber that handles a key's
// messages in order while other keys go on.
func GoByKey(n int, key func(i int) string, limit int, fn func(group []int)) {
	sem := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for _, group := range groupBy(n, key) {
		// A group holds one slot for its whole run: this bounds the
		// goroutines as well as the messages in hand.
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(group)
		})
	}
	wg.Wait()
}

// PublishKeyGroups is Publish for a publisher whose broker takes one message
// per call (an HTTP request, an MQTT PUBLISH): it sends the groups of
// GroupByKey in parallel (GoByKey), at most limit at a time, and each group
// in order, one message after the previous one's answer. Once a message of
// a group fails, the rest of the group is not sent: those messages get
// KeyHold's error (ErrHeldBack, wrapped with Unavailable when the failure
// was unavailable too). A message reached after ctx has ended gets
// Unavailable(ctx.Err()). send must be safe for concurrent use; the result
// is nil when every message was sent.
func PublishKeyGroups(ctx context.Context, msgs []Message, limit int, send func(context.Context, *Message) error) []error {
	if len(msgs) == 0 {
		return nil
	}
	errs := make([]error, len(msgs))
	GoByKey(len(msgs), func(i int) string { return msgs[i].Key }, limit, func(group []int) {
		sendGroup(ctx, msgs, group, errs, send)
	})
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// sendGroup sends the messages of one group in order. Each goroutine writes
// only its own indexes of errs.
func sendGroup(ctx context.Context, msgs []Message, group []int, errs []error, send func(context.Context, *Message) error) {
	var hold KeyHold
	for _, i := range group {
		if ctx.Err() != nil {
			errs[i] = Unavailable(ctx.Err())
		} else if errs[i] = hold.Held(&msgs[i]); errs[i] == nil {
			errs[i] = send(ctx, &msgs[i])
			hold.Fail(&msgs[i], errs[i])
		}
	}
}

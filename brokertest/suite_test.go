package brokertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

// The suite run against an in-process broker: a unit test of the suite's own
// logic (that its checks pass for an adapter that keeps the contract), not
// evidence about any real broker.
func TestSuiteInMemory(t *testing.T) {
	Run(t, Env{
		Features: Features{Ordered: true, Dedup: false, DeadLetter: true, SharedGroup: true, HandOver: true},
		Timeout:  10 * time.Second,
		Setup:    memSetup,
	})
}

// With no features claimed, the suite checks the weaker guarantees instead.
func TestSuiteInMemoryWithoutFeatures(t *testing.T) {
	Run(t, Env{Timeout: 10 * time.Second, Setup: memSetup})
}

func memSetup(t *testing.T) *Bundle {
	b := &memBroker{groups: map[string]*memGroup{}}
	return &Bundle{
		Publisher: b,
		Topic:     "mem.topic",
		NewSubscriber: func(t *testing.T, opts SubscriberOptions) Subscriber {
			return &memSub{g: b.group(opts.Group), max: opts.MaxDeliveries}
		},
		Unreachable: func(t *testing.T) outbox.Publisher { return &memBroker{down: true} },
		Refused: func() outbox.Message {
			m := messages("mem.topic", "refused", 1, 0)[0]
			m.Topic = "refused.topic"
			return m
		},
		DeadLetters: func(ctx context.Context, group string) ([]outbox.Message, error) {
			g := b.group(group)
			g.mu.Lock()
			defer g.mu.Unlock()
			return append([]outbox.Message(nil), g.dead...), nil
		},
		Kill: func(sub Subscriber) { sub.(*memSub).kill() },
	}
}

type memBroker struct {
	mu     sync.Mutex
	down   bool
	groups map[string]*memGroup
}

type memGroup struct {
	mu   sync.Mutex
	ch   chan outbox.Message
	dead []outbox.Message
}

func (b *memBroker) group(name string) *memGroup {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.groups[name]
	if g == nil {
		g = &memGroup{ch: make(chan outbox.Message, 100000)}
		b.groups[name] = g
	}
	return g
}

func (b *memBroker) Publish(ctx context.Context, msgs []outbox.Message) []error {
	return outbox.PublishWaves(ctx, msgs, b.publish)
}

func (b *memBroker) publish(ctx context.Context, msgs []outbox.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	for i, m := range msgs {
		switch {
		case b.down:
			fail(i, outbox.Unavailable(errors.New("mem: connection refused")))
		case ctx.Err() != nil:
			fail(i, outbox.Unavailable(ctx.Err()))
		case m.Topic == "refused.topic":
			fail(i, fmt.Errorf("mem: no route for %q", m.Topic))
		default:
			b.mu.Lock()
			for _, g := range b.groups {
				g.ch <- m
			}
			b.mu.Unlock()
		}
	}
	return errs
}

type memSub struct {
	g   *memGroup
	max int

	mu     sync.Mutex
	inHand *outbox.Message // taken from the group and not settled
	killed bool
}

// kill gives the message in hand back to the group at once, as a broker
// does when a subscriber's connection drops, and makes Run fail when its
// handler returns.
func (s *memSub) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killed = true
	if s.inHand != nil {
		s.g.ch <- *s.inHand
		s.inHand = nil
	}
}

// take marks m in hand, unless the subscriber was killed.
func (s *memSub) take(m outbox.Message) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.killed {
		s.g.ch <- m
		return false
	}
	s.inHand = &m
	return true
}

// settle ends the message in hand; it reports false when the subscriber was
// killed meanwhile (the message went back to the group then).
func (s *memSub) settle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inHand = nil
	return !s.killed
}

var errKilled = errors.New("mem: subscriber killed")

func (s *memSub) Run(ctx context.Context, h outbox.Handler) error {
	attempts := map[string]int{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-s.g.ch:
			if !s.take(m) {
				return errKilled
			}
			// Retry in place until success or the limit: in-order, like a
			// broker that redelivers before moving on.
			for {
				attempts[m.MsgID]++
				err := h(context.WithoutCancel(ctx), m)
				if err == nil {
					delete(attempts, m.MsgID)
					if !s.settle() {
						return errKilled
					}
					break
				}
				if ctx.Err() != nil {
					// Stopping after a failure: leave it to the group.
					if s.settle() {
						s.g.ch <- m
					}
					return nil
				}
				if outbox.IsPermanent(err) || attempts[m.MsgID] >= s.max {
					if !s.settle() {
						return errKilled
					}
					s.g.mu.Lock()
					s.g.dead = append(s.g.dead, m)
					s.g.mu.Unlock()
					break
				}
			}
		}
	}
}

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
		Features: Features{Ordered: true, Dedup: false, DeadLetter: true, SharedGroup: true},
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
}

func (s *memSub) Run(ctx context.Context, h outbox.Handler) error {
	attempts := map[string]int{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-s.g.ch:
			// Retry in place until success or the limit: in-order, like a
			// broker that redelivers before moving on.
			for {
				attempts[m.MsgID]++
				err := h(context.WithoutCancel(ctx), m)
				if err == nil {
					delete(attempts, m.MsgID)
					break
				}
				if outbox.IsPermanent(err) || attempts[m.MsgID] >= s.max {
					s.g.mu.Lock()
					s.g.dead = append(s.g.dead, m)
					s.g.mu.Unlock()
					break
				}
			}
		}
	}
}

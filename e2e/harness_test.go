package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/brokertest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// memBroker is an in-process queue: a unit test of the harness itself (its
// crash, duplicate and counting logic), not evidence that any broker works.
type memBroker struct {
	ch chan outbox.Message
}

type memSub struct{ b *memBroker }

func (s memSub) Run(ctx context.Context, h outbox.Handler) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-s.b.ch:
			if err := h(context.WithoutCancel(ctx), m); err != nil {
				go func() { s.b.ch <- m }() // redeliver
			}
		}
	}
}

func TestHarnessInMemory(t *testing.T) {
	b := &memBroker{ch: make(chan outbox.Message, 100000)}
	Run(t, Broker{
		Name:  "mem",
		Topic: "transfer.done",
		NewPublisher: func(t *testing.T) outbox.Publisher {
			return outbox.PublishFunc(func(ctx context.Context, m outbox.Message) error {
				b.ch <- m
				return nil
			})
		},
		NewSubscriber: func(t *testing.T, group string) brokertest.Subscriber { return memSub{b} },
		// Nothing to restart in memory; the call still runs the harness's restart step.
		Restart: func(t *testing.T) {},
	})
}

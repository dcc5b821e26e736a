package outboxnats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/brokertest"
)

// TestOutageKeepsPrefetched: the messages fetched ahead of one whose
// handler reports an outage wait without being counted against
// MaxDeliveries, even when the pause outlasts AckWait.
func TestOutageKeepsPrefetched(t *testing.T) {
	requireShared(t)
	u, _ := testURL(t, sharedURL())
	b := newBundleAt(t, u)
	sub := newBackoffSubscriber(t, u, brokertest.BackoffOptions{Group: "prefetched", MaxDeliveries: 2,
		RedeliveryDelay: 50 * time.Millisecond, RedeliveryDelayMax: 200 * time.Millisecond, DeadLetterAfter: -1}, time.Second)
	const outage = 3500 * time.Millisecond // over three AckWaits
	var (
		mu    sync.Mutex
		first time.Time
		calls = map[string]int{}
	)
	done := make(chan struct{})
	var once sync.Once
	msgs := make([]outbox.Message, 5)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("pf-%d", i), Topic: b.Topic, Key: "k", Payload: []byte(`{}`)}
	}
	h := func(_ context.Context, m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls[m.MsgID]++
		if m.MsgID == msgs[0].MsgID {
			if first.IsZero() {
				first = time.Now()
			}
			if time.Since(first) < outage {
				return outbox.DatabaseUnavailable(errors.New("connection refused"))
			}
		}
		if m.MsgID == msgs[len(msgs)-1].MsgID {
			once.Do(func() { close(done) })
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- sub.Run(ctx, h) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	if errs := b.Publisher.Publish(context.Background(), msgs); errs != nil {
		t.Fatal(errs)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the messages were not all handled within 30s")
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	dead, err := b.DeadLetters(dctx, "prefetched")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range dead {
		t.Errorf("%s was dead-lettered", m.MsgID)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range msgs[1:] {
		if calls[m.MsgID] == 0 {
			t.Errorf("%s was not handled", m.MsgID)
		}
	}
}

package outboxnats

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/brokertest"
)

// TestStalePrefetchedCopies: messages that wait in the prefetch buffer past
// AckWait are delivered again into the same buffer; once the first copy is
// handled, the later copies are settled without a second handling and are
// never dead-lettered, however many deliveries they carry.
func TestStalePrefetchedCopies(t *testing.T) {
	requireShared(t)
	u, _ := testURL(t, sharedURL())
	b := newBundleAt(t, u)
	sub := newBackoffSubscriber(t, u, brokertest.BackoffOptions{Group: "stale", MaxDeliveries: 2,
		RedeliveryDelay: 50 * time.Millisecond, RedeliveryDelayMax: 200 * time.Millisecond, DeadLetterAfter: -1}, time.Second)
	var (
		mu    sync.Mutex
		calls = map[string]int{}
	)
	msgs := make([]outbox.Message, 4)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("st-%d", i), Topic: b.Topic, Key: "k", Payload: []byte(`{}`)}
	}
	h := func(_ context.Context, m outbox.Message) error {
		mu.Lock()
		calls[m.MsgID]++
		n := calls[m.MsgID]
		mu.Unlock()
		if m.MsgID == msgs[0].MsgID && n == 1 {
			time.Sleep(3500 * time.Millisecond) // over three AckWaits, the others wait in the buffer
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- sub.Run(ctx, h) }()
	if errs := b.Publisher.Publish(context.Background(), msgs); errs != nil {
		t.Fatal(errs)
	}
	time.Sleep(8 * time.Second) // the slow message, the buffered copies, and their redeliveries
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	dead, err := b.DeadLetters(dctx, "stale")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range dead {
		t.Errorf("%s was dead-lettered", m.MsgID)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range msgs {
		if calls[m.MsgID] != 1 {
			t.Errorf("%s was handled %d times, want 1", m.MsgID, calls[m.MsgID])
		}
	}
}

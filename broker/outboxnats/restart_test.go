package outboxnats

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

// TestRestart: a private nats-server is killed and started again on the
// same port and store. While it is down Publish reports outbox.Unavailable
// promptly; afterwards the same Publisher and the running Subscriber carry
// on, and every acked message reaches the handler.
func TestRestart(t *testing.T) {
	t.Parallel()
	srv := startPrivateServer(t)
	u, _ := testURL(t, srv.URL())
	u += "&timeout=2s&ack_wait=2s"
	pub := newTestPublisher(t, u)
	sub := newTestSubscriber(t, u, "restart", 5)

	var mu sync.Mutex
	seen := map[string]int{}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(runCtx, func(_ context.Context, m outbox.Message) error {
			mu.Lock()
			seen[m.MsgID]++
			mu.Unlock()
			return nil
		})
	}()
	batch := func(from, n int) []outbox.Message {
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = outbox.Message{MsgID: fmt.Sprintf("r-%d", from+i), Topic: suiteTopic, Key: "k", Payload: json.RawMessage(`{}`)}
		}
		return msgs
	}
	publish := func(msgs []outbox.Message) []error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return pub.Publish(ctx, msgs)
	}
	waitSeen := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			got := len(seen)
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d messages handled", got, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	if errs := publish(batch(0, 100)); errs != nil {
		t.Fatalf("before the restart: %v", errs)
	}
	waitSeen(100)

	srv.Stop()
	start := time.Now()
	errs := publish(batch(100, 10))
	if len(errs) != 10 {
		t.Fatalf("Publish with the server down returned %v", errs)
	}
	for i, err := range errs {
		if !outbox.IsUnavailable(err) {
			t.Errorf("message %d with the server down: %v, want outbox.Unavailable", i, err)
		}
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Publish with the server down took %s", el)
	}

	srv.Start()
	// The client reconnects by itself; the relay would retry after a pause.
	deadline := time.Now().Add(20 * time.Second)
	for {
		errs := publish(batch(100, 100))
		if errs == nil {
			break
		}
		if !outbox.IsUnavailable(errs[0]) || time.Now().After(deadline) {
			t.Fatalf("after the restart: %v", errs[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitSeen(200)
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run after the restart: %v", err)
	}
}

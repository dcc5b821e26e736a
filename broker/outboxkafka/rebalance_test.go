package outboxkafka_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
)

// TestFailingRecordAllowsRebalance: a record whose handler keeps failing
// does not hold the group's rebalances: a member that joins meanwhile gets
// its partitions and handles their messages while the record still fails,
// the failing member loses no partition to the RebalanceTimeout, and the
// record is handled once its handler recovers, neither skipped nor
// dead-lettered, before the records behind it.
func TestFailingRecordAllowsRebalance(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, brokerURL, 2)
	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: brokerURL})
	logs := &logBuffer{}
	cfg := func(log io.Writer) outboxkafka.SubscriberConfig {
		return outboxkafka.SubscriberConfig{URL: brokerURL, Group: topic, Topics: []string{topic},
			RedeliveryDelay: 200 * time.Millisecond, RedeliveryDelayMax: 800 * time.Millisecond, DeadLetterAfter: time.Minute,
			SessionTimeout: 6 * time.Second, RebalanceTimeout: 2 * time.Second,
			Logger: slog.New(slog.NewTextHandler(io.MultiWriter(log, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug}))}
	}
	const failFor = 8 * time.Second
	var (
		mu      sync.Mutex
		first   time.Time
		handled = map[string]time.Time{}
		firstB  time.Time // when the new member first handled a message
		calls   []time.Time
	)
	handler := func(member string) outbox.Handler {
		return func(_ context.Context, m outbox.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if m.MsgID == "poison" {
				calls = append(calls, time.Now())
				if first.IsZero() {
					first = time.Now()
				}
				if time.Since(first) < failFor {
					return errors.New("still failing")
				}
			}
			if _, ok := handled[m.MsgID]; !ok {
				handled[m.MsgID] = time.Now()
			}
			if member == "b" && firstB.IsZero() {
				firstB = time.Now()
			}
			return nil
		}
	}
	run := func(name string, sub *outboxkafka.Subscriber) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- sub.Run(ctx, handler(name)) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run of %s: %v", name, err)
			}
		})
	}
	run("a", newSubscriber(t, cfg(logs)))
	// The poison message and one behind it on the same partition (same key).
	publish(t, pub, outbox.Message{MsgID: "poison", Topic: topic, Key: "p", Payload: []byte(`1`)},
		outbox.Message{MsgID: "behind", Topic: topic, Key: "p", Payload: []byte(`1`)})
	waitUntil(t, 10*time.Second, "the poison message's first delivery", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !first.IsZero()
	})
	run("b", newSubscriber(t, cfg(io.Discard)))
	// Past the RebalanceTimeout: the group has rebalanced by now, or
	// removed a member that held it up.
	time.Sleep(3 * time.Second)
	var msgs []outbox.Message
	for i := range 20 {
		msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("m-%d", i), Topic: topic, Key: fmt.Sprintf("k-%d", i), Payload: []byte(`2`)})
	}
	publish(t, pub, msgs...)
	waitUntil(t, 30*time.Second, "every message to be handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if handled[m.MsgID].IsZero() {
				return false
			}
		}
		return !handled["behind"].IsZero()
	})
	// A member removed from the group learns it (and logs its partitions
	// lost) once its poll ends.
	time.Sleep(1500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	switch {
	case firstB.IsZero():
		t.Errorf("the new member handled none of the messages")
	case !firstB.Before(handled["poison"]):
		t.Errorf("the new member handled its first message %s after the failing record was handled: the rebalance waited for it", firstB.Sub(handled["poison"]))
	}
	if lost := logs.lines("partitions lost"); len(lost) > 0 {
		t.Errorf("the failing record held the rebalance past RebalanceTimeout:\n%s", lost[0])
	}
	if handled["poison"].Sub(first) < failFor {
		t.Errorf("poison handled %s after its first delivery, before its handler recovered", handled["poison"].Sub(first))
	}
	if !handled["behind"].After(handled["poison"]) {
		t.Errorf("the message behind the failing one was handled before it")
	}
	for i := 1; i < len(calls); i++ {
		want := min(200*time.Millisecond<<(i-1), 800*time.Millisecond)
		if gap := calls[i].Sub(calls[i-1]); gap < want-time.Millisecond {
			t.Errorf("delivery %d of the failing record came %s after the one before, want at least %s", i+1, gap, want)
		}
	}
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package outboxkafka_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
)

// TestTopicCreatedLater: a subscriber started before its topic exists
// consumes it once it is created.
func TestTopicCreatedLater(t *testing.T) {
	t.Parallel()
	log := testLogger(t)
	topic := "late-" + time.Now().Format("150405.000000")
	sub := newSubscriber(t, outboxkafka.SubscriberConfig{URL: brokerURL, Group: "late", Topics: []string{topic}, Logger: log})
	got := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(ctx, func(_ context.Context, m outbox.Message) error {
			got <- m.MsgID
			return nil
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	time.Sleep(500 * time.Millisecond)
	createTopic(t, brokerURL, topic, 2)
	start := time.Now()
	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: brokerURL, Logger: log})
	if errs := pub.Publish(context.Background(), []outbox.Message{{MsgID: "late-1", Topic: topic, Payload: json.RawMessage(`1`)}}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	select {
	case id := <-got:
		t.Logf("%s consumed %s after the topic was created", id, time.Since(start))
	case <-time.After(30 * time.Second):
		t.Fatal("the subscriber did not consume a topic created after it started within 30s")
	}
}

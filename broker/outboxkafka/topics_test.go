package outboxkafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
)

// topicsBundle is a private one-broker cluster (without auto-creation unless
// asked) and a publisher on it.
type topicsBundle struct {
	url string
	pub *outboxkafka.Publisher
}

func setupTopics(t *testing.T, cfg outboxkafka.PublisherConfig, opts ...kfake.Opt) *topicsBundle {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	url := "kafka://" + c.ListenAddrs()[0]
	cfg.URL = url + cfg.URL
	return &topicsBundle{url: url, pub: newPublisher(t, cfg)}
}

// publishWithin publishes msgs with a deadline of d and fails the test if
// Publish takes much longer than that.
func (b *topicsBundle) publishWithin(t *testing.T, d time.Duration, msgs ...outbox.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	errs := b.pub.Publish(ctx, msgs)
	if took := time.Since(start); took > d+time.Second {
		t.Fatalf("Publish took %s with a deadline of %s", took, d)
	}
	return errs
}

// wantUnknownTopic fails the test unless err is a refusal (not Unavailable)
// for a missing topic that names the topic.
func wantUnknownTopic(t *testing.T, err error, topic string) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("message to missing topic %q: acked, want a refusal", topic)
	case outbox.IsUnavailable(err):
		t.Fatalf("message to missing topic %q: Unavailable (the relay would never spend its retries): %v", topic, err)
	case !errors.Is(err, outboxkafka.ErrUnknownTopic) || !errors.Is(err, kerr.UnknownTopicOrPartition):
		t.Fatalf("message to missing topic %q: %v, want ErrUnknownTopic wrapping UNKNOWN_TOPIC_OR_PARTITION", topic, err)
	case !strings.Contains(err.Error(), `"`+topic+`"`):
		t.Fatalf("the refusal does not name topic %q: %v", topic, err)
	}
}

func msg(id, topic, key string) outbox.Message {
	return outbox.Message{MsgID: id, Topic: topic, Key: key, Payload: json.RawMessage(`1`)}
}

// TestMissingTopicRefused: a message to a topic that does not exist is
// refused at once, whatever the Publish deadline and whatever came before
// (franz-go's own wait for a missing topic grows to ~20s once a wait was cut
// short, which made such a message Unavailable for ever), while the messages
// of the batch to an existing topic are acked.
func TestMissingTopicRefused(t *testing.T) {
	t.Parallel()
	b := setupTopics(t, outboxkafka.PublisherConfig{URL: "?timeout=5s"})
	existing := newTopic(t, b.url, 1)
	for _, step := range []struct {
		topic    string
		deadline time.Duration
	}{
		{"missing-a", 3 * time.Second},
		{"missing-b", 500 * time.Millisecond},
		{"missing-c", 40 * time.Second}, // capped by the URL's timeout=5s
		{"missing-a", 500 * time.Millisecond},
		{"missing-b", 5 * time.Second},
	} {
		errs := b.publishWithin(t, step.deadline, msg("x", step.topic, ""))
		if errs == nil {
			t.Fatalf("%s: acked, want a refusal", step.topic)
		}
		wantUnknownTopic(t, errs[0], step.topic)

		// The same missing topic amid messages to an existing one, with
		// keys of their own: those are acked.
		errs = b.publishWithin(t, step.deadline,
			msg("e1", existing, "k1"), msg("m", step.topic, "k2"), msg("e2", existing, "k3"), msg("e3", existing, ""))
		if errs == nil {
			t.Fatalf("%s in a batch: all acked, want a refusal", step.topic)
		}
		wantUnknownTopic(t, errs[1], step.topic)
		for _, i := range []int{0, 2, 3} {
			if errs[i] != nil {
				t.Fatalf("message %d to existing topic %s: %v, want an ack", i, existing, errs[i])
			}
		}
	}
}

// TestTopicCreatedAfterRefusal: a refused topic is not remembered as
// missing; once created, the next Publish to it is acked.
func TestTopicCreatedAfterRefusal(t *testing.T) {
	t.Parallel()
	b := setupTopics(t, outboxkafka.PublisherConfig{URL: "?timeout=5s"})
	const topic = "created-later"
	for range 2 {
		errs := b.publishWithin(t, 500*time.Millisecond, msg("x", topic, "k"))
		if errs == nil {
			t.Fatal("acked before the topic exists, want a refusal")
		}
		wantUnknownTopic(t, errs[0], topic)
	}
	createTopic(t, b.url, topic, 1)
	if errs := b.publishWithin(t, 5*time.Second, msg("x", topic, "k")); errs != nil {
		t.Fatalf("Publish after the topic was created: %v", errs)
	}
}

// TestTopicDeletedAfterUse: a topic deleted after messages were acked to it
// is refused again, at the latest on the Publish after one that gave up
// waiting for it.
func TestTopicDeletedAfterUse(t *testing.T) {
	t.Parallel()
	b := setupTopics(t, outboxkafka.PublisherConfig{URL: "?timeout=5s"})
	topic := newTopic(t, b.url, 1)
	if errs := b.publishWithin(t, 5*time.Second, msg("x", topic, "")); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	adm, ctx := admin(t, b.url)
	if _, err := adm.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		errs := b.publishWithin(t, 500*time.Millisecond, msg("x", topic, ""))
		if errs == nil {
			t.Fatal("acked after the topic was deleted")
		}
		t.Logf("attempt %d: %v", attempt, errs[0])
		if !outbox.IsUnavailable(errs[0]) {
			wantUnknownTopic(t, errs[0], topic)
			return
		}
		if attempt == 2 {
			t.Fatalf("still Unavailable on attempt %d: %v", attempt, errs[0])
		}
	}
}

// TestAutoCreateTopics: with auto_create=true the check lets the broker
// create the topic, as a produce would; on brokers that do not create
// topics, the message is refused all the same, with a hint that says so.
func TestAutoCreateTopics(t *testing.T) {
	t.Parallel()
	t.Run("allowed", func(t *testing.T) {
		t.Parallel()
		b := setupTopics(t, outboxkafka.PublisherConfig{URL: "?timeout=5s&auto_create=true"}, kfake.AllowAutoTopicCreation())
		if errs := b.publishWithin(t, 5*time.Second, msg("x", "auto-created", "")); errs != nil {
			t.Fatalf("Publish to a topic the broker creates: %v", errs)
		}
	})
	t.Run("broker refuses", func(t *testing.T) {
		t.Parallel()
		b := setupTopics(t, outboxkafka.PublisherConfig{URL: "?timeout=5s&auto_create=true"})
		errs := b.publishWithin(t, 500*time.Millisecond, msg("x", "not-created", ""))
		if errs == nil {
			t.Fatal("acked, want a refusal")
		}
		wantUnknownTopic(t, errs[0], "not-created")
		if !strings.Contains(errs[0].Error(), "auto.create.topics.enable is false") {
			t.Fatalf("the refusal does not say the brokers do not create topics: %v", errs[0])
		}
	})
}

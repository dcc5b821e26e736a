package outboxmqtt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/outbox-go/outbox"
)

func msgs(topic, prefix string, n int) []outbox.Message {
	out := make([]outbox.Message, n)
	for i := range out {
		out[i] = outbox.Message{MsgID: fmt.Sprintf("%s-%d", prefix, i), Topic: topic, Key: fmt.Sprintf("k%d", i%3),
			Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	return out
}

// publishUntilAcked publishes msgs as the relay would: the ones that fail
// as unavailable, or as 0x10 while the subscription comes back, are
// published again.
func publishUntilAcked(t *testing.T, pub *Publisher, batch []outbox.Message) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(batch) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs := pub.Publish(ctx, batch)
		cancel()
		var again []outbox.Message
		for i, err := range errs {
			switch {
			case err == nil:
			case outbox.IsUnavailable(err), errors.Is(err, outbox.ErrHeldBack), errors.Is(err, ErrNoSubscribers):
				again = append(again, batch[i])
			default:
				t.Fatalf("Publish %s: %v", batch[i].MsgID, err)
			}
		}
		batch = again
		if len(batch) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d messages still not acked after 30s: %v", len(batch), errs)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// seen records the msg_ids a handler got.
type seen struct {
	mu  sync.Mutex
	ids map[string]int
}

func (s *seen) handler(_ context.Context, m outbox.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[m.MsgID]++
	return nil
}

func (s *seen) waitAll(t *testing.T, ms []outbox.Message) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.mu.Lock()
		missing := 0
		for _, m := range ms {
			if s.ids[m.MsgID] == 0 {
				missing++
			}
		}
		s.mu.Unlock()
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages never arrived", missing, len(ms))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBrokerRestart: the messages kept for an absent member survive a
// restart of the broker, and a running publisher and subscriber carry on
// after another one.
func TestBrokerRestart(t *testing.T) {
	t.Parallel()
	m := startMosquitto(t, "")
	ctx := testCtx(t, time.Minute)
	pub, err := NewPublisher(ctx, PublisherConfig{URL: m.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := NewSubscriber(ctx, SubscriberConfig{URL: m.URL(), Group: "g", Name: "one", Topic: "restart", SessionExpiry: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	before := msgs("restart", "before", 30)
	publishUntilAcked(t, pub, before) // kept in the absent member's session
	m.Restart()

	got := &seen{ids: map[string]int{}}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sub.Run(runCtx, got.handler) }()
	got.waitAll(t, before)

	during := msgs("restart", "during", 30)
	publishUntilAcked(t, pub, during)
	got.waitAll(t, during)

	m.Restart()
	after := msgs("restart", "after", 30)
	publishUntilAcked(t, pub, after)
	got.waitAll(t, after)

	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestBrokerRefusal: a message the broker refuses (over message_size_limit,
// PUBACK 0x95) fails alone, as a refusal, and the rest of its key is held
// back.
func TestBrokerRefusal(t *testing.T) {
	t.Parallel()
	m := startMosquitto(t, "message_size_limit 1000")
	for _, qos := range []int{1, 2} {
		t.Run(fmt.Sprintf("qos=%d", qos), func(t *testing.T) { testRefusal(t, m.URL(), qos) })
	}
}

func testRefusal(t *testing.T, url string, qos int) {
	ctx := testCtx(t, time.Minute)
	pub, err := NewPublisher(ctx, PublisherConfig{URL: url, QoS: qos, NoSubscribers: NoSubscribersOK})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	batch := msgs("refuse", "r", 4)
	batch[1].Payload = json.RawMessage(`"` + strings.Repeat("x", 2000) + `"`)
	batch[1].Key = "big"
	batch[3].Key = "big"
	errs := pub.Publish(ctx, batch)
	var pe *PublishError
	if len(errs) != 4 || !errors.As(errs[1], &pe) || pe.ReasonCode != 0x95 || outbox.IsUnavailable(errs[1]) {
		t.Fatalf("Publish = %v, want a *PublishError 0x95 for message 1", errs)
	}
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("neighbours of the refused message failed: %v", errs)
	}
	if !errors.Is(errs[3], outbox.ErrHeldBack) || outbox.IsUnavailable(errs[3]) {
		t.Errorf("the next message of the refused one's key: %v, want outbox.ErrHeldBack", errs[3])
	}
}

// TestQoS2: messages published with QoS 2 arrive.
func TestQoS2(t *testing.T) {
	t.Parallel()
	requireBroker(t, "127.0.0.1:1883")
	e := newEnv(t, sharedURL)
	sub := e.subscriber(t, "g", 3)
	pub, err := NewPublisher(testCtx(t, 10*time.Second), PublisherConfig{URL: sharedURL + "?qos=2&no_subscribers=ok"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	batch := msgs(e.topic(), "q2", 20)
	if errs := pub.Publish(testCtx(t, 10*time.Second), batch); errs != nil {
		t.Fatal(errs)
	}
	got := &seen{ids: map[string]int{}}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx, got.handler) }()
	got.waitAll(t, batch)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestNoSubscribers: a PUBACK 0x10 is a refusal by default, a success with
// no_subscribers=ok.
func TestNoSubscribers(t *testing.T) {
	t.Parallel()
	requireBroker(t, "127.0.0.1:1883")
	ctx := testCtx(t, 30*time.Second)
	topic := "nosub." + randomHex(6)
	strict, err := NewPublisher(ctx, PublisherConfig{URL: sharedURL})
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	errs := strict.Publish(ctx, msgs(topic, "ns", 1))
	if len(errs) != 1 || !errors.Is(errs[0], ErrNoSubscribers) || outbox.IsUnavailable(errs[0]) {
		t.Fatalf("Publish with nobody subscribed = %v, want ErrNoSubscribers as a refusal", errs)
	}
	if !strings.Contains(errs[0].Error(), "create the consumer group first") {
		t.Errorf("error does not say what to do: %v", errs[0])
	}
	lax, err := NewPublisher(ctx, PublisherConfig{URL: sharedURL + "?no_subscribers=ok"})
	if err != nil {
		t.Fatal(err)
	}
	defer lax.Close()
	if errs := lax.Publish(ctx, msgs(topic, "ns", 1)); errs != nil {
		t.Fatalf("Publish with no_subscribers=ok = %v, want success", errs)
	}
}

// TestDeadLetterWithoutSubscriber: Run stops rather than let the broker drop
// a dead letter, and the message is not acked.
func TestDeadLetterWithoutSubscriber(t *testing.T) {
	t.Parallel()
	requireBroker(t, "127.0.0.1:1883")
	ctx := testCtx(t, 30*time.Second)
	topic := "nodead." + randomHex(6)
	sub, err := NewSubscriber(ctx, SubscriberConfig{URL: sharedURL, Group: "g", Name: "n-" + randomHex(4), Topic: topic,
		DeadLetterTopic: "outbox/dead/" + topic + "/{group}", SessionExpiry: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Leave(context.Background()) })
	pub, err := NewPublisher(ctx, PublisherConfig{URL: sharedURL})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	publishUntilAcked(t, pub, msgs(topic, "poison", 1))
	err = sub.Run(ctx, func(context.Context, outbox.Message) error { return outbox.Permanent(errors.New("bad")) })
	if err == nil || !strings.Contains(err.Error(), "has no subscriber") {
		t.Fatalf("Run = %v, want an error about the dead-letter topic without subscriber", err)
	}
	// The message was not acked: the member gets it again.
	got := &seen{ids: map[string]int{}}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sub.Run(runCtx, got.handler) }()
	got.waitAll(t, msgs(topic, "poison", 1))
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestNotAnEvent: a PUBLISH without the CloudEvents attributes goes to the
// dead-letter topic at once, with the reason.
func TestNotAnEvent(t *testing.T) {
	t.Parallel()
	requireBroker(t, "127.0.0.1:1883")
	e := newEnv(t, sharedURL)
	sub := e.subscriber(t, "g", 3)
	b, err := parseURL(sharedURL)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := dial(testCtx(t, 10*time.Second), connOptions{url: b, clientID: "raw-" + randomHex(4),
		keepAlive: 30 * time.Second, connectTimeout: 10 * time.Second, packetTimeout: 10 * time.Second, cleanStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer disconnect(cm)
	if _, err := cm.Publish(testCtx(t, 10*time.Second), rawPublish(destination(DefaultTopicTemplate, e.topic()), `{"not":"an event"}`)); err != nil {
		t.Fatal(err)
	}
	calls := 0
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(ctx, func(context.Context, outbox.Message) error { calls++; return nil })
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(e.dead["g"].raw()) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if calls != 0 {
		t.Errorf("handler called %d times for a message that is not an event", calls)
	}
	raw := e.dead["g"].raw()
	if len(raw) != 1 || !strings.Contains(raw[0][AttrDeadReason], "no id attribute") || raw[0][AttrDeadGroup] != "g" {
		t.Fatalf("dead letters: %v", raw)
	}
}

// rawPublish is a PUBLISH that is not an outbox event: no attributes.
func rawPublish(topic, body string) *paho.Publish {
	return &paho.Publish{QoS: 1, Topic: topic, Payload: []byte(body)}
}

// TestLeave: after Leave the group's subscription is gone, so the broker
// keeps nothing more for the member.
func TestLeave(t *testing.T) {
	t.Parallel()
	requireBroker(t, "127.0.0.1:1883")
	ctx := testCtx(t, 30*time.Second)
	topic := "leave." + randomHex(6)
	sub, err := NewSubscriber(ctx, SubscriberConfig{URL: sharedURL, Group: "g", Name: "n", Topic: topic, SessionExpiry: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := NewPublisher(ctx, PublisherConfig{URL: sharedURL})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if errs := pub.Publish(ctx, msgs(topic, "kept", 1)); errs != nil {
		t.Fatalf("Publish to a group: %v", errs)
	}
	if err := sub.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	errs := pub.Publish(ctx, msgs(topic, "dropped", 1))
	if len(errs) != 1 || !errors.Is(errs[0], ErrNoSubscribers) {
		t.Fatalf("Publish after the only member left = %v, want ErrNoSubscribers", errs)
	}
}

// TestRunWaitsForBroker: Run started while the broker is down waits for it,
// and stops cleanly if its context ends first.
func TestRunWaitsForBroker(t *testing.T) {
	t.Parallel()
	m := startMosquitto(t, "")
	ctx := testCtx(t, time.Minute)
	sub, err := NewSubscriber(ctx, SubscriberConfig{URL: m.URL() + "?connect_timeout=500ms", Group: "g", Name: "n", Topic: "wait"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	m.Stop()

	// Down for good: Run returns nil when its context ends.
	shortCtx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	defer cancel()
	if err := sub.Run(shortCtx, func(context.Context, outbox.Message) error { return nil }); err != nil {
		t.Fatalf("Run with the broker down = %v, want nil when its context ends", err)
	}

	got := &seen{ids: map[string]int{}}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sub.Run(runCtx, got.handler) }()
	time.Sleep(300 * time.Millisecond)
	m.Start()
	pub, err := NewPublisher(ctx, PublisherConfig{URL: m.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	batch := msgs("wait", "w", 10)
	publishUntilAcked(t, pub, batch)
	got.waitAll(t, batch)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestBaselineSendsThePublishersMessage: baseline's PUBLISHes are the
// Publisher's (the CloudEvents user properties), each with its own id, so
// that a subscriber reads them as messages of the topic and the relay's
// ratio to baseline compares the same messages.
func TestBaselineSendsThePublishersMessage(t *testing.T) {
	t.Parallel()
	requireBroker(t, "127.0.0.1:1883")
	e := newEnv(t, sharedURL)
	sub := e.subscriber(t, "g", 3)
	if _, err := baseline(testCtx(t, 10*time.Second), sharedURL, e.topic(), 20, 200, 10); err != nil {
		t.Fatal(err)
	}
	// The baseline numbers its messages from 1.
	want := make([]outbox.Message, 20)
	for i := range want {
		want[i].MsgID = fmt.Sprintf("baseline-%d", i+1)
	}
	arrived := &seen{ids: map[string]int{}}
	var mu sync.Mutex
	got := map[string]outbox.Message{}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(ctx, func(ctx context.Context, m outbox.Message) error {
			mu.Lock()
			got[m.MsgID] = m
			mu.Unlock()
			return arrived.handler(ctx, m)
		})
	}()
	arrived.waitAll(t, want)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(got) != 20 {
		t.Fatalf("%d distinct messages arrived, want 20", len(got))
	}
	for id, m := range got {
		if m.Topic != e.topic() || len(m.Payload) != 200 || m.CreatedAt.IsZero() || !strings.HasPrefix(id, "baseline-") {
			t.Fatalf("a baseline message: %+v", m)
		}
	}
}

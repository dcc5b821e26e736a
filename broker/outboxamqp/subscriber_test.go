package outboxamqp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
)

// fixture is one test's exchange, topic and clean-up.
type fixture struct {
	exchange, topic string
	queues          []string
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{exchange: name("outboxtest"), topic: name("topic")}
	t.Cleanup(func() {
		ch := admin(t)
		for _, q := range f.queues {
			ch.QueueDelete(q, false, false, false)
		}
		ch.ExchangeDelete(f.exchange, false, false)
	})
	return f
}

func (f *fixture) publisher(t *testing.T) *outboxamqp.Publisher {
	p, err := outboxamqp.NewPublisher(context.Background(), outboxamqp.PublisherConfig{URL: brokerURL, Exchange: f.exchange})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func (f *fixture) subscriber(t *testing.T, cfg outboxamqp.SubscriberConfig) *outboxamqp.Subscriber {
	cfg.URL, cfg.Exchange, cfg.BindingKey = brokerURL, f.exchange, f.topic
	if cfg.Group == "" {
		cfg.Group = "g"
	}
	cfg.Queue = f.exchange + "." + cfg.Group
	s, err := outboxamqp.NewSubscriber(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.queues = append(f.queues, s.Queue(), s.DeadLetterQueue())
	t.Cleanup(func() { s.Close() })
	return s
}

func (f *fixture) messages(prefix string, n int) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("%s-%d", prefix, i), Topic: f.topic, Payload: []byte(`{"i":1}`)}
	}
	return msgs
}

func queueLen(t *testing.T, queue string) int {
	q, err := admin(t).QueueDeclarePassive(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// waitQueueLen waits until queue holds n messages.
func waitQueueLen(t *testing.T, queue string, n int) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := queueLen(t, queue)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s holds %d messages, want %d", queue, got, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run runs s with h until the returned stop is called.
func run(t *testing.T, s *outboxamqp.Subscriber, h outbox.Handler) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, h) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestNotAnEvent: a message without the CloudEvents attributes never reaches
// the handler; it goes to the dead-letter queue at once.
func TestNotAnEvent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.subscriber(t, outboxamqp.SubscriberConfig{})
	called := make(chan string, 10)
	run(t, s, func(_ context.Context, m outbox.Message) error { called <- m.MsgID; return nil })
	ch := admin(t)
	if err := ch.Publish(f.exchange, f.topic, false, false, amqp.Publishing{Body: []byte(`{"raw":true}`)}); err != nil {
		t.Fatal(err)
	}
	waitQueueLen(t, s.DeadLetterQueue(), 1)
	select {
	case id := <-called:
		t.Fatalf("the handler got %q", id)
	default:
	}
}

// TestOneDelivery: MaxDeliveries 1 (x-delivery-limit 0), with no least
// span (a negative DeadLetterAfter), dead-letters after the first failure.
func TestOneDelivery(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.subscriber(t, outboxamqp.SubscriberConfig{MaxDeliveries: 1, DeadLetterAfter: -1})
	var mu sync.Mutex
	calls := 0
	run(t, s, func(context.Context, outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return errors.New("fails")
	})
	if errs := f.publisher(t).Publish(context.Background(), f.messages("one", 1)); errs != nil {
		t.Fatal(errs)
	}
	waitQueueLen(t, s.DeadLetterQueue(), 1)
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Errorf("handler called %d times, want 1", calls)
	}
}

// TestStopSpendsNoDelivery: stopping and starting subscribers does not count
// against the delivery limit (with the default prefetch of 1), so healthy
// messages are not dead-lettered by restarts.
func TestStopSpendsNoDelivery(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.subscriber(t, outboxamqp.SubscriberConfig{MaxDeliveries: 2})
	msgs := f.messages("stop", 6)
	if errs := f.publisher(t).Publish(context.Background(), msgs); errs != nil {
		t.Fatal(errs)
	}
	seen := map[string]int{}
	var mu sync.Mutex
	for range 5 {
		handled := make(chan struct{}, 10)
		stop := run(t, s, func(_ context.Context, m outbox.Message) error {
			mu.Lock()
			seen[m.MsgID]++
			mu.Unlock()
			handled <- struct{}{}
			return nil
		})
		<-handled
		stop()
	}
	waitQueueLen(t, s.Queue(), 1)
	if n := queueLen(t, s.DeadLetterQueue()); n != 0 {
		t.Errorf("%d messages dead-lettered by restarts", n)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s handled %d times", id, n)
		}
	}
}

// TestNackIsRefusal: a message the broker nacks (a full queue with
// reject-publish) fails alone with ErrNacked, not as outbox.Unavailable.
func TestNackIsRefusal(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ch := admin(t)
	full := f.exchange + ".full"
	if _, err := ch.QueueDeclare(full, true, false, false, false, amqp.Table{
		amqp.QueueMaxLenArg: int64(1), amqp.QueueOverflowArg: amqp.QueueOverflowRejectPublish,
	}); err != nil {
		t.Fatal(err)
	}
	f.queues = append(f.queues, full)
	p := f.publisher(t) // declares the exchange
	if err := ch.QueueBind(full, f.topic, f.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	errs := p.Publish(context.Background(), f.messages("nack", 3))
	if len(errs) != 3 || errs[0] != nil || !errors.Is(errs[1], outboxamqp.ErrNacked) || !errors.Is(errs[2], outboxamqp.ErrNacked) || outbox.IsUnavailable(errs[1]) {
		t.Fatalf("Publish into a full reject-publish queue: %v, want nil then ErrNacked twice", errs)
	}
}

// TestTooLarge: a body over MaxMessageBytes is refused without being sent,
// and a later message with its key is held back.
func TestTooLarge(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.subscriber(t, outboxamqp.SubscriberConfig{})
	p, err := outboxamqp.NewPublisher(context.Background(), outboxamqp.PublisherConfig{URL: brokerURL, Exchange: f.exchange, MaxMessageBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msgs := f.messages("big", 3)
	msgs[0].Payload = []byte(`"` + strings.Repeat("x", 200) + `"`)
	msgs[0].Key, msgs[1].Key = "k", "k"
	errs := p.Publish(context.Background(), msgs)
	if len(errs) != 3 || !errors.Is(errs[0], outboxamqp.ErrTooLarge) || outbox.IsUnavailable(errs[0]) ||
		!errors.Is(errs[1], outbox.ErrHeldBack) || errs[2] != nil {
		t.Fatalf("Publish: %v, want ErrTooLarge, ErrHeldBack, nil", errs)
	}
}

// TestDeclarationConflict: a group's queue declared with another delivery
// limit is reported as ErrTopology, with what to do.
func TestDeclarationConflict(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.subscriber(t, outboxamqp.SubscriberConfig{MaxDeliveries: 3})
	_, err := outboxamqp.NewSubscriber(context.Background(), outboxamqp.SubscriberConfig{
		URL: brokerURL, Group: "g", Queue: f.exchange + ".g", Exchange: f.exchange, MaxDeliveries: 4,
	})
	if !errors.Is(err, outboxamqp.ErrTopology) || outbox.IsUnavailable(err) || !strings.Contains(err.Error(), "other settings") {
		t.Fatalf("NewSubscriber with another MaxDeliveries: %v, want ErrTopology", err)
	}
}

// TestNewPublisherErrors: a wrong password and a broker that is not there
// give one clear error each, without the password.
func TestNewPublisherErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := outboxamqp.NewPublisher(ctx, outboxamqp.PublisherConfig{URL: "amqp://guest:wrongsecret@127.0.0.1:5672/"})
	if !errors.Is(err, outboxamqp.ErrRefusedLogin) || outbox.IsUnavailable(err) || strings.Contains(err.Error(), "wrongsecret") {
		t.Errorf("wrong password: %v", err)
	}
	_, err = outboxamqp.NewPublisher(ctx, outboxamqp.PublisherConfig{URL: "amqp://guest:guest@127.0.0.1:5672/no-such-vhost"})
	if !errors.Is(err, outboxamqp.ErrRefusedLogin) {
		t.Errorf("missing vhost: %v", err)
	}
	_, err = outboxamqp.NewPublisher(ctx, outboxamqp.PublisherConfig{URL: "amqp://guest:topsecret@127.0.0.1:1/"})
	if !outbox.IsUnavailable(err) || strings.Contains(err.Error(), "topsecret") {
		t.Errorf("nobody listening: %v", err)
	}
	_, err = outboxamqp.NewPublisher(ctx, outboxamqp.PublisherConfig{URL: brokerURL, Exchange: name("missing"), NoDeclare: true})
	if !errors.Is(err, outboxamqp.ErrTopology) {
		t.Errorf("declare=false on a missing exchange: %v", err)
	}
	t.Log(err)
}

// TestQueueDeleted: deleting the group's queue under a running subscriber
// ends Run with ErrQueueDeleted rather than declaring it again.
func TestQueueDeleted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.subscriber(t, outboxamqp.SubscriberConfig{})
	done := make(chan error, 1)
	go func() {
		done <- s.Run(context.Background(), func(context.Context, outbox.Message) error { return nil })
	}()
	time.Sleep(300 * time.Millisecond) // let it start consuming
	if _, err := admin(t).QueueDelete(s.Queue(), false, false, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, outboxamqp.ErrQueueDeleted) {
			t.Fatalf("Run after the queue was deleted: %v, want ErrQueueDeleted", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run went on after its queue was deleted")
	}
}

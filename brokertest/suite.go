package brokertest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

// Run runs the whole suite against env, each test in parallel.
func Run(t *testing.T, env Env) {
	if env.Timeout == 0 {
		env.Timeout = 30 * time.Second
	}
	s := &suite{env: env}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"PublishEmpty", s.testPublishEmpty},
		{"RoundTrip", s.testRoundTrip},
		{"PipelinedBatches", s.testPipelinedBatches},
		{"ConcurrentPublish", s.testConcurrentPublish},
		{"OrderPerKey", s.testOrderPerKey},
		{"OrderManyKeys", s.testOrderManyKeys},
		{"DuplicatePublish", s.testDuplicatePublish},
		{"Redelivery", s.testRedelivery},
		{"DeadLetter", s.testDeadLetter},
		{"PermanentError", s.testPermanentError},
		{"GroupsIndependent", s.testGroupsIndependent},
		{"SharedGroup", s.testSharedGroup},
		{"GracefulStop", s.testGracefulStop},
		{"StoppedBeforeSuccess", s.testStoppedBeforeSuccess},
		{"KilledBeforeSuccess", s.testKilledBeforeSuccess},
		{"Unreachable", s.testUnreachable},
		{"CanceledContext", s.testCanceledContext},
		{"Refused", s.testRefused},
		{"RefusedHoldsBackItsKey", s.testRefusedHoldsBackItsKey},
		{"Undeliverable", s.testUndeliverable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type suite struct {
	env Env
}

var epoch = time.Date(2026, 11, 30, 12, 0, 0, 123456000, time.UTC)

// messages returns n messages for topic, with ids prefix-0..n-1, keys cycling
// over keys (none when keys is 0), headers and varied payloads.
func messages(topic, prefix string, n, keys int) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		m := outbox.Message{
			MsgID:     fmt.Sprintf("%s-%d", prefix, i),
			Topic:     topic,
			Payload:   json.RawMessage(fmt.Sprintf(`{"n":%d,"text":"größe 10€ \"quoted\"","list":[1,2,3]}`, i)),
			Headers:   map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", i, i), "tenant": "t ü/1"},
			CreatedAt: epoch.Add(time.Duration(i) * time.Microsecond),
		}
		if keys > 0 {
			m.Key = fmt.Sprintf("key-%d", i%keys)
		}
		msgs[i] = m
	}
	return msgs
}

func (s *suite) publish(t *testing.T, pub outbox.Publisher, msgs []outbox.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.env.Timeout)
	defer cancel()
	errs := pub.Publish(ctx, msgs)
	if errs == nil {
		return
	}
	if len(errs) != len(msgs) {
		t.Fatalf("Publish returned %d errors for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Publish: message %d (%s): %v", i, msgs[i].MsgID, err)
		}
	}
}

// recorder is the handler side of a test: per msg_id, it counts the
// handler's calls (deliveries) and the calls that returned nil (succeeded).
// It does not deduplicate: every successful delivery counts, so a test that
// wants a message handled once checks succeeded == 1. Turning a second
// delivery into no second effect is the inbox's job, tested end to end in
// e2e with a real inbox.
type recorder struct {
	mu         sync.Mutex
	deliveries map[string]int
	succeeded  map[string]int
	received   map[string]outbox.Message // the first successful delivery
	order      map[string][]string       // key -> msg_ids in order of first success
	changed    chan struct{}
	// fail decides whether a delivery fails; nil never fails.
	fail func(m outbox.Message, attempt int) error
	// block, when set, is called (outside the lock) at the start of each delivery.
	block func(m outbox.Message)
}

func newRecorder() *recorder {
	return &recorder{
		deliveries: map[string]int{},
		succeeded:  map[string]int{},
		received:   map[string]outbox.Message{},
		order:      map[string][]string{},
		changed:    make(chan struct{}, 1),
	}
}

func (r *recorder) handler() outbox.Handler {
	return func(ctx context.Context, m outbox.Message) error {
		if r.block != nil {
			r.block(m)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		defer r.notify()
		r.deliveries[m.MsgID]++
		if r.fail != nil {
			if err := r.fail(m, r.deliveries[m.MsgID]); err != nil {
				return err
			}
		}
		if r.succeeded[m.MsgID] == 0 {
			r.received[m.MsgID] = m
			r.order[m.Key] = append(r.order[m.Key], m.MsgID)
		}
		r.succeeded[m.MsgID]++
		return nil
	}
}

func (r *recorder) notify() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until cond holds (checked under the lock) or the timeout.
func (r *recorder) waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-tick.C:
		case <-deadline.C:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("timed out after %s waiting for %s; %d distinct messages handled successfully, %d delivered",
				timeout, what, len(r.succeeded), len(r.deliveries))
		}
	}
}

// waitSucceeded waits until the handler has succeeded for every msg_id of
// msgs.
func (r *recorder) waitSucceeded(t *testing.T, timeout time.Duration, msgs []outbox.Message) {
	t.Helper()
	r.waitFor(t, timeout, fmt.Sprintf("%d messages to be handled successfully", len(msgs)), func() bool {
		for _, m := range msgs {
			if r.succeeded[m.MsgID] == 0 {
				return false
			}
		}
		return true
	})
}

// run starts sub with h and returns a function that stops it: it ends Run's
// context and checks that Run returned nil in time.
func (s *suite) run(t *testing.T, sub Subscriber, h outbox.Handler) (stop func()) {
	t.Helper()
	r := s.start(t, sub, h)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			r.cancel()
			if err := r.wait(); err != nil {
				t.Errorf("subscriber Run returned %v after its context ended, want nil", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// running is a subscriber's Run in progress.
type running struct {
	t       *testing.T
	timeout time.Duration
	cancel  context.CancelFunc // ends Run's context
	done    chan error
	once    sync.Once
	err     error
}

// start runs sub with h until cancel; the caller waits for it.
func (s *suite) start(t *testing.T, sub Subscriber, h outbox.Handler) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, timeout: s.env.Timeout, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- sub.Run(ctx, h) }()
	return r
}

// wait waits for Run to return after cancel (or a Kill), and returns its
// error; it fails the test when Run does not return in time.
func (r *running) wait() error {
	r.once.Do(func() {
		select {
		case r.err = <-r.done:
		case <-time.After(r.timeout):
			r.t.Errorf("subscriber Run did not return within %s of its context ending", r.timeout)
		}
	})
	return r.err
}

func (s *suite) subscriber(t *testing.T, b *Bundle, group string) Subscriber {
	t.Helper()
	return b.NewSubscriber(t, SubscriberOptions{Group: group, MaxDeliveries: MaxDeliveries})
}

// redeliverAfter is SubscriberOptions.RedeliverAfter where a test waits for
// (or watches for) the redelivery of an unacked message.
const redeliverAfter = time.Second

// fastSubscriber is a subscriber whose broker redelivers an unacked message
// within redeliverAfter.
func (s *suite) fastSubscriber(t *testing.T, b *Bundle, group string) Subscriber {
	t.Helper()
	return b.NewSubscriber(t, SubscriberOptions{Group: group, MaxDeliveries: MaxDeliveries, RedeliverAfter: redeliverAfter})
}

package brokertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
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

func (s *suite) testPublishEmpty(t *testing.T) {
	b := s.env.Setup(t)
	if errs := b.Publisher.Publish(context.Background(), nil); errs != nil {
		t.Fatalf("Publish(nil) = %v, want nil", errs)
	}
}

// testRoundTrip: every attribute a row carries arrives as it left.
func (s *suite) testRoundTrip(t *testing.T) {
	b := s.env.Setup(t)
	msgs := messages(b.Topic, "rt", 10, 3)
	msgs[0].Key = ""
	msgs[1].Headers = nil
	msgs[2].Payload = json.RawMessage(`"just a string"`)
	msgs[3].Payload = json.RawMessage(`[]`)
	msgs[4].MsgID = "order-42:OrderPaid/ü " + msgs[4].MsgID

	rec := newRecorder()
	sub := s.subscriber(t, b, "rt")
	s.publish(t, b.Publisher, msgs)
	s.run(t, sub, rec.handler())
	rec.waitSucceeded(t, s.env.Timeout, msgs)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, want := range msgs {
		got := rec.received[want.MsgID]
		if got.Topic != want.Topic || got.Key != want.Key || !got.CreatedAt.Equal(want.CreatedAt) {
			t.Errorf("%s: got topic %q key %q time %s, want %q %q %s",
				want.MsgID, got.Topic, got.Key, got.CreatedAt, want.Topic, want.Key, want.CreatedAt)
		}
		if !jsonEqual(got.Payload, want.Payload) {
			t.Errorf("%s: payload %s, want %s", want.MsgID, got.Payload, want.Payload)
		}
		if !maps.Equal(got.Headers, want.Headers) && (len(got.Headers) != 0 || len(want.Headers) != 0) {
			t.Errorf("%s: headers %v, want %v", want.MsgID, got.Headers, want.Headers)
		}
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// testPipelinedBatches: batches of the relay's default size, all acked, and
// each handled successfully once (a second success would mean an ack was
// lost on a healthy broker).
func (s *suite) testPipelinedBatches(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	sub := s.subscriber(t, b, "batches")
	s.run(t, sub, rec.handler())
	msgs := messages(b.Topic, "pb", 2000, 16)
	for i := 0; i < len(msgs); i += 500 {
		s.publish(t, b.Publisher, msgs[i:i+500])
	}
	rec.waitSucceeded(t, s.env.Timeout, msgs)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	redelivered := 0
	for _, m := range msgs {
		if rec.succeeded[m.MsgID] != 1 {
			t.Errorf("%s handled successfully %d times, want 1", m.MsgID, rec.succeeded[m.MsgID])
		}
		if rec.deliveries[m.MsgID] > 1 {
			redelivered++
		}
	}
	if redelivered > 0 {
		t.Logf("%d of %d messages were delivered more than once (allowed: at least once)", redelivered, len(msgs))
	}
}

// testConcurrentPublish: one Publisher used by several relays at once.
func (s *suite) testConcurrentPublish(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	sub := s.subscriber(t, b, "concurrent")
	s.run(t, sub, rec.handler())
	var all []outbox.Message
	var wg sync.WaitGroup
	for g := range 4 {
		msgs := messages(b.Topic, fmt.Sprintf("cp%d", g), 200, 4)
		all = append(all, msgs...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), s.env.Timeout)
			defer cancel()
			for i, err := range b.Publisher.Publish(ctx, msgs) {
				if err != nil {
					t.Errorf("concurrent Publish: %s: %v", msgs[i].MsgID, err)
				}
			}
		}()
	}
	wg.Wait()
	rec.waitSucceeded(t, s.env.Timeout, all)
}

// testOrderPerKey: one subscriber sees each key's messages in batch order.
// A broker without Features.Ordered must still deliver every message of
// two batches of interleaved keys; only the order goes unchecked.
func (s *suite) testOrderPerKey(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	sub := s.subscriber(t, b, "order")
	s.run(t, sub, rec.handler())
	msgs := messages(b.Topic, "ord", 600, 3)
	s.publish(t, b.Publisher, msgs[:300])
	s.publish(t, b.Publisher, msgs[300:])
	s.checkKeyOrder(t, rec, msgs)
}

// testOrderManyKeys: 20 keys × 20 messages, interleaved, published in
// batches of 40 (each batch holds two messages of every key) reach one
// subscriber of a group with each key's messages in publish order.
func (s *suite) testOrderManyKeys(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	sub := s.subscriber(t, b, "manykeys")
	s.run(t, sub, rec.handler())
	msgs := messages(b.Topic, "mk", 400, 20)
	for start := 0; start < len(msgs); start += 40 {
		s.publish(t, b.Publisher, msgs[start:start+40])
	}
	s.checkKeyOrder(t, rec, msgs)
}

// checkKeyOrder waits until every message of msgs succeeded and, with
// Features.Ordered, checks that each key's messages arrived in msgs' order.
func (s *suite) checkKeyOrder(t *testing.T, rec *recorder, msgs []outbox.Message) {
	t.Helper()
	rec.waitSucceeded(t, s.env.Timeout, msgs)
	if !s.env.Features.Ordered {
		t.Log("Features.Ordered is false: every message arrived; their order is not checked")
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := map[string][]string{}
	for _, m := range msgs {
		want[m.Key] = append(want[m.Key], m.MsgID)
	}
	for key, ids := range want {
		if !slices.Equal(rec.order[key], ids) {
			t.Errorf("key %s arrived out of order: %v", key, firstDiff(rec.order[key], ids))
		}
	}
}

func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("position %d is %s, want %s", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("%d messages, want %d", len(got), len(want))
}

// testDuplicatePublish: the relay publishes a batch again (a crash between
// publish and mark). A broker with Features.Dedup drops the copies: each
// message reaches the handler once, which is checked after a marker
// published later was handled (a copy that got through would have arrived
// by then on the brokers here, which deliver a stream in order to one
// subscriber). Without it, both copies of every message reach the handler;
// that they cause one effect is the inbox's job, tested in e2e.
func (s *suite) testDuplicatePublish(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	sub := s.subscriber(t, b, "dup")
	s.run(t, sub, rec.handler())
	msgs := messages(b.Topic, "dup", 50, 5)
	s.publish(t, b.Publisher, msgs)
	s.publish(t, b.Publisher, msgs)
	marker := messages(b.Topic, "dup-marker", 1, 0)
	s.publish(t, b.Publisher, marker)
	rec.waitSucceeded(t, s.env.Timeout, append(slices.Clone(msgs), marker...))
	if !s.env.Features.Dedup {
		rec.waitFor(t, s.env.Timeout, "both copies of every message to be handled", func() bool {
			for _, m := range msgs {
				if rec.succeeded[m.MsgID] < 2 {
					return false
				}
			}
			return true
		})
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, m := range msgs {
		if n := rec.deliveries[m.MsgID]; n != 1 {
			t.Errorf("%s delivered %d times; the broker should have dropped the copy (Features.Dedup)", m.MsgID, n)
		}
	}
}

var errTransient = errors.New("brokertest: transient handler failure")

// testRedelivery: a handler error brings the message back. A message whose
// handler fails MaxDeliveries-1 times is delivered exactly MaxDeliveries
// times and succeeds once (not dead-lettered, and not delivered again once
// its success was acked); its neighbours are delivered once.
func (s *suite) testRedelivery(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	rec.fail = func(m outbox.Message, attempt int) error {
		if attempt <= MaxDeliveries-1 && m.Key == "key-0" {
			return errTransient
		}
		return nil
	}
	sub := s.subscriber(t, b, "redeliver")
	s.run(t, sub, rec.handler())
	msgs := messages(b.Topic, "re", 30, 3)
	s.publish(t, b.Publisher, msgs)
	rec.waitSucceeded(t, s.env.Timeout, msgs)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, m := range msgs {
		want := 1
		if m.Key == "key-0" {
			want = MaxDeliveries
		}
		if got := rec.deliveries[m.MsgID]; got != want {
			t.Errorf("%s delivered %d times, want %d", m.MsgID, got, want)
		}
		if got := rec.succeeded[m.MsgID]; got != 1 {
			t.Errorf("%s handled successfully %d times, want 1", m.MsgID, got)
		}
	}
}

// testDeadLetter: a message whose handler always fails is delivered
// MaxDeliveries times and then lands on the dead-letter path; its neighbours
// are handled and do not. Without Features.DeadLetter the poison message
// must still not block its neighbours, and keep coming back.
func (s *suite) testDeadLetter(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	msgs := messages(b.Topic, "dl", 10, 0)
	poison := msgs[3].MsgID
	rec.fail = func(m outbox.Message, attempt int) error {
		if m.MsgID == poison {
			return fmt.Errorf("poison, attempt %d", attempt)
		}
		return nil
	}
	sub := s.subscriber(t, b, "dead")
	s.run(t, sub, rec.handler())
	s.publish(t, b.Publisher, msgs)
	good := slices.Delete(slices.Clone(msgs), 3, 4)
	rec.waitSucceeded(t, s.env.Timeout, good)
	if !s.env.Features.DeadLetter {
		rec.waitFor(t, s.env.Timeout, "the poison message to be redelivered", func() bool {
			return rec.deliveries[poison] >= 2
		})
		t.Log("Features.DeadLetter is false: the poison message is redelivered without end and blocks nothing")
		return
	}
	s.waitDeadLetters(t, b, "dead", []string{poison})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got := rec.deliveries[poison]; got != MaxDeliveries {
		t.Errorf("poison message delivered %d times, want MaxDeliveries = %d", got, MaxDeliveries)
	}
}

// testPermanentError: outbox.Permanent skips the remaining deliveries.
// Without Features.DeadLetter the message's neighbours must still be handled.
func (s *suite) testPermanentError(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	msgs := messages(b.Topic, "perm", 5, 0)
	bad := msgs[1].MsgID
	rec.fail = func(m outbox.Message, attempt int) error {
		if m.MsgID == bad {
			return outbox.Permanent(errors.New("cannot parse"))
		}
		return nil
	}
	sub := s.subscriber(t, b, "perm")
	s.run(t, sub, rec.handler())
	s.publish(t, b.Publisher, msgs)
	if !s.env.Features.DeadLetter {
		rec.waitSucceeded(t, s.env.Timeout, slices.Delete(slices.Clone(msgs), 1, 2))
		t.Log("Features.DeadLetter is false: the neighbours of the permanently failing message were handled")
		return
	}
	s.waitDeadLetters(t, b, "perm", []string{bad})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got := rec.deliveries[bad]; got != 1 {
		t.Errorf("message failed with outbox.Permanent delivered %d times, want 1", got)
	}
}

// waitDeadLetters waits until the group's dead-letter path holds exactly ids.
func (s *suite) waitDeadLetters(t *testing.T, b *Bundle, group string, ids []string) {
	t.Helper()
	deadline := time.Now().Add(s.env.Timeout)
	var got []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		dead, err := b.DeadLetters(ctx, group)
		cancel()
		if err != nil {
			t.Fatalf("DeadLetters: %v", err)
		}
		got = got[:0]
		for _, m := range dead {
			got = append(got, m.MsgID)
			if len(m.Payload) == 0 {
				t.Errorf("dead letter %s has no payload", m.MsgID)
			}
		}
		slices.Sort(got)
		if slices.Equal(got, ids) {
			return
		}
		if len(got) > len(ids) || time.Now().After(deadline) {
			t.Fatalf("dead-letter path of group %s holds %v, want %v", group, got, ids)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// testGroupsIndependent: each consumer group gets every message.
func (s *suite) testGroupsIndependent(t *testing.T) {
	b := s.env.Setup(t)
	recA, recB := newRecorder(), newRecorder()
	subA := s.subscriber(t, b, "group-a")
	subB := s.subscriber(t, b, "group-b")
	s.run(t, subA, recA.handler())
	s.run(t, subB, recB.handler())
	msgs := messages(b.Topic, "grp", 100, 4)
	s.publish(t, b.Publisher, msgs)
	recA.waitSucceeded(t, s.env.Timeout, msgs)
	recB.waitSucceeded(t, s.env.Timeout, msgs)
}

// testSharedGroup: two subscribers of one group share the work; together
// they handle every message successfully once. Without
// Features.SharedGroup two subscribers of one group must still, together,
// handle every message (each perhaps twice).
func (s *suite) testSharedGroup(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	var mu sync.Mutex
	per := map[int]int{}
	h := rec.handler()
	counted := func(i int) outbox.Handler {
		return func(ctx context.Context, m outbox.Message) error {
			mu.Lock()
			per[i]++
			mu.Unlock()
			return h(ctx, m)
		}
	}
	sub1 := s.subscriber(t, b, "shared")
	sub2 := s.subscriber(t, b, "shared")
	s.run(t, sub1, counted(1))
	s.run(t, sub2, counted(2))
	msgs := messages(b.Topic, "sh", 400, 8)
	s.publish(t, b.Publisher, msgs)
	rec.waitSucceeded(t, s.env.Timeout, msgs)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, m := range msgs {
		if rec.succeeded[m.MsgID] != 1 && s.env.Features.SharedGroup {
			t.Errorf("%s handled successfully %d times in one group", m.MsgID, rec.succeeded[m.MsgID])
		}
	}
	mu.Lock()
	t.Logf("deliveries per subscriber: %v", per)
	mu.Unlock()
}

// testGracefulStop: stopping a subscriber lets the handler in hand finish
// and acks it, so the group does not see it again. The subscribers are
// fastSubscribers, so that an unacked message would come back within
// redeliverAfter.
func (s *suite) testGracefulStop(t *testing.T) {
	b := s.env.Setup(t)
	rec := newRecorder()
	first := messages(b.Topic, "stop", 1, 0)
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	rec.block = func(m outbox.Message) {
		if m.MsgID == first[0].MsgID {
			once.Do(func() { close(entered) })
			<-release
		}
	}
	sub := s.fastSubscriber(t, b, "stop")
	stop := s.run(t, sub, rec.handler())
	s.publish(t, b.Publisher, first)
	select {
	case <-entered:
	case <-time.After(s.env.Timeout):
		t.Fatal("the first message never reached the handler")
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	// A Run that does not wait for its handler returns as soon as it sees
	// its context end, well within this window.
	select {
	case <-stopped:
		t.Fatal("Run returned while its handler was still running")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	<-stopped
	rec.mu.Lock()
	if rec.succeeded[first[0].MsgID] != 1 {
		t.Fatalf("the message in hand was handled successfully %d times, want 1", rec.succeeded[first[0].MsgID])
	}
	rec.mu.Unlock()

	// A new subscriber of the group gets the next message, and not the one
	// acked before the stop. Had the stop left it unacked, the broker would
	// hand it to the new subscriber when it joins (a Kafka assignment
	// starting at the committed offset, a RabbitMQ requeue on the old
	// connection's close, a resumed MQTT session) or within redeliverAfter
	// (JetStream's AckWait, Redis's MinIdle): so once the next messages were
	// handled, twice redeliverAfter is long enough to see it.
	rec.block = nil
	next := messages(b.Topic, "stop-next", 3, 0)
	sub2 := s.fastSubscriber(t, b, "stop")
	s.run(t, sub2, rec.handler())
	s.publish(t, b.Publisher, next)
	rec.waitSucceeded(t, s.env.Timeout, next)
	time.Sleep(2 * redeliverAfter)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if n := rec.deliveries[first[0].MsgID]; n != 1 {
		t.Errorf("the message acked before the stop was delivered %d times, want 1", n)
	}
}

var errStopped = errors.New("brokertest: the handler's transaction was cut off by the stop")

// testStoppedBeforeSuccess: a subscriber is stopped while its handler is in
// the middle of message X, and the handler then fails, as an inbox
// transaction cut off by the stop's deadline does. Nothing that subscriber
// handled succeeded, so nothing may have been acked: X and the messages
// behind it must all reach another subscriber of the group. A subscriber
// that acks (commits the offset of) a message before its handler finished
// fails here. With Features.HandOver the other subscriber is already
// running while the first one holds X; without it, it is made after the
// first one's Run returned.
func (s *suite) testStoppedBeforeSuccess(t *testing.T) {
	b := s.env.Setup(t)
	msgs := messages(b.Topic, "unacked", 5, 1) // one key: one partition, in order
	recA, recB := newRecorder(), newRecorder()
	entered, cutOff := holdHandler(recA)
	recA.fail = func(outbox.Message, int) error { return errStopped }
	subA := s.subscriber(t, b, "unacked")
	a := s.start(t, subA, recA.handler())
	t.Cleanup(func() { a.cancel(); _ = a.wait() })
	t.Cleanup(cutOff)
	s.publish(t, b.Publisher, msgs)
	s.waitEntered(t, entered)
	if s.env.Features.HandOver {
		s.run(t, s.subscriber(t, b, "unacked"), recB.handler())
	}
	// The stop first, then the handler's failure: a subscriber that tried
	// X again would find its context ended.
	a.cancel()
	cutOff()
	if err := a.wait(); err != nil {
		t.Errorf("subscriber Run returned %v after its context ended, want nil", err)
	}
	if !s.env.Features.HandOver {
		s.run(t, s.subscriber(t, b, "unacked"), recB.handler())
	}
	recB.waitSucceeded(t, s.env.Timeout, msgs)
	recA.mu.Lock()
	defer recA.mu.Unlock()
	t.Logf("the stopped subscriber's handler was called %d times", sum(recA.deliveries))
}

// holdHandler makes rec's handler wait, from its first call on, until
// release is called (once, or more: later calls do nothing); entered is
// closed at that first call.
func holdHandler(rec *recorder) (entered <-chan struct{}, release func()) {
	in := make(chan struct{})
	out := make(chan struct{})
	var once sync.Once
	rec.block = func(outbox.Message) {
		once.Do(func() { close(in) })
		<-out
	}
	return in, sync.OnceFunc(func() { close(out) })
}

// waitEntered waits until a handler held by holdHandler was called.
func (s *suite) waitEntered(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(s.env.Timeout):
		t.Fatal("no message reached the first subscriber's handler")
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// testKilledBeforeSuccess: a subscriber whose handler holds message X is
// killed (Bundle.Kill: its connections cut, no graceful drain) while the
// handler still runs. X and the messages behind it must reach another
// subscriber of the group, which must not wait for the killed one's handler.
func (s *suite) testKilledBeforeSuccess(t *testing.T) {
	b := s.env.Setup(t)
	if b.Kill == nil {
		t.Log("Bundle.Kill is nil: a killed subscriber's messages going to the group is unchecked (the graceful stop is, in StoppedBeforeSuccess)")
		return
	}
	msgs := messages(b.Topic, "killed", 5, 1)
	recA, recB := newRecorder(), newRecorder()
	entered, released := holdHandler(recA)
	subA := s.fastSubscriber(t, b, "killed")
	a := s.start(t, subA, recA.handler())
	// The killed subscriber's Run may return an error; it must return once
	// its handler does.
	t.Cleanup(func() { a.cancel(); _ = a.wait() })
	t.Cleanup(released)
	s.publish(t, b.Publisher, msgs)
	s.waitEntered(t, entered)
	b.Kill(subA)
	s.run(t, s.fastSubscriber(t, b, "killed"), recB.handler())
	recB.waitSucceeded(t, s.env.Timeout, msgs)
	// The killed subscriber's handler now succeeds, too late: its ack has
	// no connection to go on.
	released()
	a.cancel()
	if err := a.wait(); err != nil {
		t.Logf("the killed subscriber's Run returned %v", err)
	}
}

// testUnreachable: a broker that cannot be reached is reported as
// outbox.Unavailable for every message, within the context's deadline.
func (s *suite) testUnreachable(t *testing.T) {
	b := s.env.Setup(t)
	pub := b.Unreachable(t)
	msgs := messages(b.Topic, "unr", 5, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	errs := pub.Publish(ctx, msgs)
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("Publish took %s with a 5s deadline", elapsed)
	}
	if len(errs) != len(msgs) {
		t.Fatalf("Publish to an unreachable broker returned %d errors for %d messages", len(errs), len(msgs))
	}
	for i, err := range errs {
		if !outbox.IsUnavailable(err) {
			t.Errorf("message %d: error %v, want one that satisfies outbox.IsUnavailable", i, err)
		}
	}
}

// testCanceledContext: a Publish whose context is over spends no retries.
func (s *suite) testCanceledContext(t *testing.T) {
	b := s.env.Setup(t)
	msgs := messages(b.Topic, "cancel", 3, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errs := b.Publisher.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish with a canceled context returned %d errors for %d messages, want one per message", len(errs), len(msgs))
	}
	for i, err := range errs {
		if !outbox.IsUnavailable(err) {
			t.Errorf("message %d: error %v, want one that satisfies outbox.IsUnavailable", i, err)
		}
	}
	// The publisher is still usable afterwards.
	rec := newRecorder()
	sub := s.subscriber(t, b, "cancel")
	s.run(t, sub, rec.handler())
	s.publish(t, b.Publisher, msgs)
	rec.waitSucceeded(t, s.env.Timeout, msgs)
}

// refusedSetup returns a bundle with a Refused message and a recorder of
// a running subscriber of group.
func (s *suite) refusedSetup(t *testing.T, group string) (*Bundle, *recorder) {
	b := s.env.Setup(t)
	if b.Refused == nil {
		t.Fatal("Bundle.Refused is nil: every adapter must give a message its broker refuses (too large, unroutable, an invalid destination)")
	}
	rec := newRecorder()
	s.run(t, s.subscriber(t, b, group), rec.handler())
	return b, rec
}

// testRefused: a message the broker refuses fails alone, as a refusal.
func (s *suite) testRefused(t *testing.T) {
	b, rec := s.refusedSetup(t, "refused")
	msgs := messages(b.Topic, "ref", 3, 0)
	bad := b.Refused()
	batch := []outbox.Message{msgs[0], bad, msgs[1], msgs[2]}
	ctx, cancel := context.WithTimeout(context.Background(), s.env.Timeout)
	defer cancel()
	errs := b.Publisher.Publish(ctx, batch)
	if len(errs) != len(batch) {
		t.Fatalf("Publish returned %v, want an error for the refused message", errs)
	}
	for i, err := range errs {
		switch {
		case i == 1 && err == nil:
			t.Errorf("the refused message %s was acked", bad.MsgID)
		case i == 1 && outbox.IsUnavailable(err):
			t.Errorf("the refused message failed with %v: a refusal must not be outbox.Unavailable (it would never reach DEAD)", err)
		case i != 1 && err != nil:
			t.Errorf("message %s failed beside the refused one: %v", batch[i].MsgID, err)
		}
	}
	rec.waitSucceeded(t, s.env.Timeout, msgs)
}

// testRefusedHoldsBackItsKey: in one batch, a refused message with a key
// holds back the later messages of its key (outbox.ErrHeldBack, not
// delivered), while its earlier message and the other keys' messages are
// acked and delivered. Published again, as the relay does once the refused
// one is settled, the held messages arrive after the earlier one of their key.
func (s *suite) testRefusedHoldsBackItsKey(t *testing.T) {
	b, rec := s.refusedSetup(t, "holdback")
	others := messages(b.Topic, "hbo", 12, 4)
	held := messages(b.Topic, "hbk", 3, 0)
	for i := range held {
		held[i].Key = "held-key"
	}
	bad := b.Refused()
	bad.Key = "held-key"
	// held[0], bad, held[1], held[2] in order, between the other keys'.
	batch := slices.Concat(others[:2], held[:1], others[2:4], []outbox.Message{bad}, others[4:7], held[1:2], others[7:10], held[2:], others[10:])
	ctx, cancel := context.WithTimeout(context.Background(), s.env.Timeout)
	defer cancel()
	errs := b.Publisher.Publish(ctx, batch)
	if len(errs) != len(batch) {
		t.Fatalf("Publish returned %v, want an error for the refused message", errs)
	}
	for i, err := range errs {
		m := batch[i]
		switch {
		case m.MsgID == bad.MsgID:
			if err == nil || outbox.IsUnavailable(err) || errors.Is(err, outbox.ErrHeldBack) {
				t.Errorf("the refused message %s: %v, want its refusal", bad.MsgID, err)
			}
		case m.MsgID == held[1].MsgID || m.MsgID == held[2].MsgID:
			if !errors.Is(err, outbox.ErrHeldBack) || outbox.IsUnavailable(err) {
				t.Errorf("%s, after the refused message of its key: %v, want outbox.ErrHeldBack", m.MsgID, err)
			}
		case err != nil:
			t.Errorf("%s failed beside the refused message: %v", m.MsgID, err)
		}
	}
	rec.waitSucceeded(t, s.env.Timeout, append(slices.Clone(others), held[0]))
	rec.mu.Lock()
	for _, m := range held[1:] {
		if n := rec.deliveries[m.MsgID]; n > 0 {
			t.Errorf("%s was delivered %d times, though Publish held it back", m.MsgID, n)
		}
	}
	rec.mu.Unlock()
	s.publish(t, b.Publisher, held[1:])
	rec.waitSucceeded(t, s.env.Timeout, held)
	if !s.env.Features.Ordered {
		t.Log("Features.Ordered is false: the held messages arrived; their order is not checked")
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got, want := rec.order["held-key"], []string{held[0].MsgID, held[1].MsgID, held[2].MsgID}; !slices.Equal(got, want) {
		t.Errorf("key held-key arrived as %v, want %v", got, want)
	}
}

// testUndeliverable: each message the transport cannot carry fails alone,
// as outbox.Undeliverable, between messages that are acked; the next Publish
// on the same publisher goes through, and the subscriber receives every
// acked message.
func (s *suite) testUndeliverable(t *testing.T) {
	b := s.env.Setup(t)
	if b.Undeliverable == nil {
		t.Log("Bundle.Undeliverable is nil: the adapter says its transport carries every row; nothing to check")
		return
	}
	poisons := b.Undeliverable()
	if len(poisons) == 0 {
		t.Fatal("Bundle.Undeliverable returned no message")
	}
	rec := newRecorder()
	sub := s.subscriber(t, b, "undeliverable")
	s.run(t, sub, rec.handler())
	var good []outbox.Message
	for p, bad := range poisons {
		msgs := messages(b.Topic, fmt.Sprintf("und%d", p), 3, 0)
		batch := []outbox.Message{msgs[0], bad, msgs[1]}
		ctx, cancel := context.WithTimeout(context.Background(), s.env.Timeout)
		errs := b.Publisher.Publish(ctx, batch)
		cancel()
		if len(errs) != len(batch) {
			t.Fatalf("poison %d (%.60q): Publish returned %v, want an error for it", p, bad.MsgID, errs)
		}
		for i, err := range errs {
			switch {
			case i == 1 && !outbox.IsUndeliverable(err):
				t.Errorf("poison %d (%.60q): error %v, want one that satisfies outbox.IsUndeliverable", p, bad.MsgID, err)
			case i == 1 && outbox.IsUnavailable(err):
				t.Errorf("poison %d: %v is also outbox.Unavailable: the relay would pause for ever", p, err)
			case i != 1 && err != nil:
				t.Errorf("poison %d: message %s beside it failed: %v", p, batch[i].MsgID, err)
			}
		}
		// The connection still works: the next Publish is acked.
		s.publish(t, b.Publisher, msgs[2:])
		good = append(good, msgs...)
	}
	rec.waitSucceeded(t, s.env.Timeout, good)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, bad := range poisons {
		if rec.deliveries[bad.MsgID] > 0 {
			t.Errorf("poison %.60q was delivered", bad.MsgID)
		}
	}
}

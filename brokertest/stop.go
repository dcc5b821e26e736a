package brokertest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

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

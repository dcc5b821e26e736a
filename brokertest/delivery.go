package brokertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

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

package brokertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

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

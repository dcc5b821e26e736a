package outbox

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestKeyWaves(t *testing.T) {
	t.Parallel()
	msgs := []Message{{Key: "a"}, {}, {Key: "b"}, {Key: "a"}, {}, {Key: "a"}, {Key: "b"}, {Key: "c"}}
	want := [][]int{{0, 1, 2, 4, 7}, {3, 6}, {5}}
	if got := KeyWaves(msgs); !reflect.DeepEqual(got, want) {
		t.Fatalf("KeyWaves = %v, want %v", got, want)
	}
	if got := KeyWaves(msgs[:3]); len(got) != 1 {
		t.Fatalf("KeyWaves of distinct keys = %v, want one wave", got)
	}
}

func TestKeyHold(t *testing.T) {
	t.Parallel()
	var h KeyHold
	a1, a2 := &Message{MsgID: "a1", Key: "a"}, &Message{MsgID: "a2", Key: "a"}
	u1, u2 := &Message{MsgID: "u1", Key: "u"}, &Message{MsgID: "u2", Key: "u"}
	none := &Message{MsgID: "n"}
	h.Fail(none, errors.New("refused"))
	h.Fail(a1, nil)
	if err := h.Held(a2); err != nil {
		t.Fatalf("held after a success: %v", err)
	}
	h.Fail(a1, errors.New("refused"))
	h.Fail(a2, Unavailable(errors.New("down"))) // not the first failure of a
	h.Fail(u1, Unavailable(errors.New("down")))
	if err := h.Held(none); err != nil {
		t.Errorf("a message without a key was held: %v", err)
	}
	if err := h.Held(a2); !errors.Is(err, ErrHeldBack) || IsUnavailable(err) {
		t.Errorf("behind a refusal: %v, want ErrHeldBack, not unavailable", err)
	}
	if err := h.Held(u2); !errors.Is(err, ErrHeldBack) || !IsUnavailable(err) {
		t.Errorf("behind an unavailable failure: %v, want ErrHeldBack and unavailable", err)
	}
}

// PublishWaves never has two messages of one key in one send call, sends a
// key's next message only after the previous one succeeded, and holds back
// the rest of a key whose message failed after it was sent; other keys
// flow, and an unavailable failure stops the later waves.
func TestPublishWaves(t *testing.T) {
	t.Parallel()
	var msgs []Message
	for i := range 4 {
		for _, k := range []string{"a", "b", "c"} {
			msgs = append(msgs, Message{MsgID: k + string(rune('1'+i)), Key: k})
		}
	}
	var calls [][]string
	send := func(_ context.Context, wave []Message) []error {
		var ids []string
		var errs []error
		keys := map[string]bool{}
		for i, m := range wave {
			if keys[m.Key] {
				t.Errorf("key %s twice in one wave", m.Key)
			}
			keys[m.Key] = true
			ids = append(ids, m.MsgID)
			if m.MsgID == "b2" {
				errs = make([]error, len(wave))
				errs[i] = errors.New("nacked")
			}
		}
		calls = append(calls, ids)
		return errs
	}
	errs := PublishWaves(context.Background(), msgs, send)
	wantCalls := [][]string{{"a1", "b1", "c1"}, {"a2", "b2", "c2"}, {"a3", "c3"}, {"a4", "c4"}}
	if !reflect.DeepEqual(calls, wantCalls) {
		t.Fatalf("send calls = %v, want %v", calls, wantCalls)
	}
	for i, m := range msgs {
		switch {
		case m.MsgID == "b2":
			if errs[i] == nil || errors.Is(errs[i], ErrHeldBack) {
				t.Errorf("b2: %v, want its own refusal", errs[i])
			}
		case m.Key == "b" && m.MsgID > "b2":
			if !errors.Is(errs[i], ErrHeldBack) || IsUnavailable(errs[i]) {
				t.Errorf("%s: %v, want ErrHeldBack", m.MsgID, errs[i])
			}
		case errs[i] != nil:
			t.Errorf("%s: %v, want sent", m.MsgID, errs[i])
		}
	}

	calls = nil
	down := func(_ context.Context, wave []Message) []error {
		calls = append(calls, nil)
		errs := make([]error, len(wave))
		errs[0] = Unavailable(errors.New("connection lost"))
		return errs
	}
	errs = PublishWaves(context.Background(), msgs, down)
	if len(calls) != 1 {
		t.Fatalf("%d send calls after an unavailable wave, want 1", len(calls))
	}
	for i := 3; i < len(msgs); i++ {
		if !IsUnavailable(errs[i]) {
			t.Errorf("%s after an unavailable wave: %v, want unavailable", msgs[i].MsgID, errs[i])
		}
	}

	calls = nil
	if errs := PublishWaves(context.Background(), msgs[:3], send); errs != nil || len(calls) != 1 || !slices.Equal(calls[0], []string{"a1", "b1", "c1"}) {
		t.Fatalf("distinct keys: errs %v, calls %v; want one call, no error", errs, calls)
	}
}

// GoByKey handles a key's indexes one at a time in order, different keys at
// once, never more than limit at a time.
func TestGoByKey(t *testing.T) {
	t.Parallel()
	keys := []string{"a", "b", "a", "", "c", "b", "a", ""}
	var mu sync.Mutex
	inHand, most := 0, 0
	busy := map[string]bool{}
	var order []int
	GoByKey(len(keys), func(i int) string { return keys[i] }, 3, func(group []int) {
		for _, i := range group {
			mu.Lock()
			if k := keys[i]; k != "" && busy[k] {
				t.Errorf("key %s handled twice at once", k)
			}
			busy[keys[i]] = true
			inHand++
			most = max(most, inHand)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			mu.Lock()
			busy[keys[i]] = false
			inHand--
			order = append(order, i)
			mu.Unlock()
		}
	})
	if most > 3 || most < 2 {
		t.Errorf("at most %d in hand at once, want 2 or 3 (limit 3)", most)
	}
	pos := map[int]int{}
	for p, i := range order {
		pos[i] = p
	}
	if len(order) != len(keys) || pos[0] > pos[2] || pos[2] > pos[6] || pos[1] > pos[5] {
		t.Errorf("handled in order %v: a key's indexes out of order, or some missing", order)
	}
}

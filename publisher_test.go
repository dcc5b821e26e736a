package outbox

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
)

func TestGroupByKey(t *testing.T) {
	t.Parallel()
	msgs := []Message{{Key: "a"}, {}, {Key: "b"}, {Key: "a"}, {}, {Key: "b"}, {Key: "c"}}
	want := [][]int{{0, 3}, {1}, {2, 5}, {4}, {6}}
	if got := GroupByKey(msgs); !reflect.DeepEqual(got, want) {
		t.Fatalf("GroupByKey = %v, want %v", got, want)
	}
	if got := GroupByKey(nil); len(got) != 0 {
		t.Fatalf("GroupByKey(nil) = %v", got)
	}
}

// PublishKeyGroups keeps each key in order, holds back a failed key's later
// messages (unavailable only when the failure was), and never has more than
// limit messages in flight.
func TestPublishKeyGroups(t *testing.T) {
	t.Parallel()
	msgs := []Message{
		{MsgID: "a1", Key: "a"}, {MsgID: "r1", Key: "r"}, {MsgID: "u1", Key: "u"}, {MsgID: "x"},
		{MsgID: "a2", Key: "a"}, {MsgID: "r2", Key: "r"}, {MsgID: "u2", Key: "u"}, {MsgID: "y"},
	}
	var mu sync.Mutex
	inFlight, most := 0, 0
	var sent []string
	send := func(ctx context.Context, m *Message) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		sent = append(sent, m.MsgID)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		switch m.MsgID {
		case "r1":
			return errors.New("refused")
		case "u1":
			return Unavailable(errors.New("connection refused"))
		}
		return nil
	}
	errs := PublishKeyGroups(context.Background(), msgs, 2, send)
	if len(errs) != len(msgs) {
		t.Fatalf("PublishKeyGroups = %v, want one result per message", errs)
	}
	for i, want := range []struct{ ok, heldBack, unavailable bool }{
		{ok: true}, {}, {unavailable: true}, {ok: true},
		{ok: true}, {heldBack: true}, {heldBack: true, unavailable: true}, {ok: true},
	} {
		err := errs[i]
		if (err == nil) != want.ok || errors.Is(err, ErrHeldBack) != want.heldBack || IsUnavailable(err) != want.unavailable {
			t.Errorf("%s: %v; want ok=%v held back=%v unavailable=%v", msgs[i].MsgID, err, want.ok, want.heldBack, want.unavailable)
		}
	}
	pos := map[string]int{}
	for i, id := range sent {
		pos[id] = i
	}
	if _, ok := pos["r2"]; ok {
		t.Error("r2 was sent after r1 failed")
	}
	if pos["a1"] > pos["a2"] {
		t.Errorf("a2 was sent before a1: %v", sent)
	}
	if most > 2 {
		t.Errorf("%d messages in flight at once, limit 2", most)
	}
	if errs := PublishKeyGroups(context.Background(), msgs[:1], 2, send); errs != nil {
		t.Errorf("all sent: %v, want nil", errs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, err := range PublishKeyGroups(ctx, msgs, 2, send) {
		if !IsUnavailable(err) {
			t.Errorf("after ctx ended: %v, want unavailable", err)
		}
	}
}

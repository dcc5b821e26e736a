package outbox

import (
	"context"
	"errors"
	"testing"
)

// holdingStore is a fakeStore that keeps key order by holding back the
// messages listed in hold, or fails the check with err.
type holdingStore struct {
	*fakeStore
	hold map[int64]bool
	err  error
}

func (s *holdingStore) HoldBack(_ context.Context, msgs []Message, _ HoldParams) ([]bool, error) {
	if s.err != nil {
		return nil, s.err
	}
	held := make([]bool, len(msgs))
	for i, m := range msgs {
		held[i] = s.hold[m.ID]
	}
	return held, nil
}

// TestRelayHoldsBackWhatTheStoreSays: a message the store holds back is not
// published and is released untouched; the rest of the batch goes; a batch
// without keys is not checked; a failed check holds every keyed message.
func TestRelayHoldsBackWhatTheStoreSays(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		wantSent []string
		wantHeld int
		keyed    bool
	}{
		{name: "held", keyed: true, wantSent: []string{"m-1", "m-3"}, wantHeld: 1},
		{name: "check fails", keyed: true, err: errors.New("database down"), wantSent: []string{"m-3"}, wantHeld: 2},
		{name: "no keys", wantSent: []string{"m-1", "m-2", "m-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeStore(3)
			if tc.keyed {
				fs.rows[0].Key, fs.rows[1].Key = "a", "a"
			}
			st := &holdingStore{fakeStore: fs, hold: map[int64]bool{2: true}, err: tc.err}
			var sent []string
			pub := PublishFunc(func(_ context.Context, m Message) error { sent = append(sent, m.MsgID); return nil })
			r, err := NewRelay(st, pub, RelayConfig{Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := r.RunOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(sent) != len(tc.wantSent) {
				t.Fatalf("sent %v, want %v", sent, tc.wantSent)
			}
			for i := range sent {
				if sent[i] != tc.wantSent[i] {
					t.Fatalf("sent %v, want %v", sent, tc.wantSent)
				}
			}
			if rep.HeldBack != tc.wantHeld || rep.Released != tc.wantHeld || rep.Sent != len(tc.wantSent) || len(rep.Results) != 3 {
				t.Fatalf("report: sent %d, released %d, held back %d, %d results; want %d sent, %d held", rep.Sent, rep.Released, rep.HeldBack, len(rep.Results), len(tc.wantSent), tc.wantHeld)
			}
			for _, res := range rep.Results {
				if res.Outcome.Kind == OutcomeRelease && !errors.Is(res.Err, ErrHeldBack) {
					t.Errorf("%s released with %v, want ErrHeldBack", res.Message.MsgID, res.Err)
				}
			}
		})
	}
}

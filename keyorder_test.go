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

// TestFailedKeysHoldTheNextBatch: the keys of a batch whose messages did not
// go (retried, released, DEAD under StopKeyAtDead, or all when the mark
// failed) hold back the later messages of those keys in the batch claimed
// next; a key whose message was sent, and the earlier ids, do not.
func TestFailedKeysHoldTheNextBatch(t *testing.T) {
	prev := batch{msgs: []Message{{ID: 1, Key: "a"}, {ID: 2, Key: "b"}, {ID: 3, Key: "c"}, {ID: 4, Key: "d"}, {ID: 5}}}
	outs := []Outcome{{Kind: OutcomeSent}, {Kind: OutcomeRetry}, {Kind: OutcomeDead}, {Kind: OutcomeRelease}, {Kind: OutcomeRetry}}
	next := []Message{{ID: 6, Key: "a"}, {ID: 7, Key: "b"}, {ID: 8, Key: "c"}, {ID: 9, Key: "d"}, {ID: 10}, {ID: 0, Key: "b"}}
	for _, tc := range []struct {
		name   string
		stop   bool
		err    error
		wanted []bool
	}{
		{name: "dead passes", wanted: []bool{false, true, false, true, false, false}},
		{name: "dead stops the key", stop: true, wanted: []bool{false, true, true, true, false, false}},
		{name: "mark failed", err: errors.New("database down"), wanted: []bool{true, true, true, true, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Relay{cfg: RelayConfig{StopKeyAtDead: tc.stop}}
			held := heldBehind(r.failedKeys(prev, outs, tc.err), next, nil)
			if held == nil {
				t.Fatal("nothing held")
			}
			for i := range next {
				if held[i] != tc.wanted[i] {
					t.Errorf("message %d (key %q): held %v, want %v", next[i].ID, next[i].Key, held[i], tc.wanted[i])
				}
			}
		})
	}
	r := &Relay{}
	if got := r.failedKeys(prev, []Outcome{{Kind: OutcomeSent}, {Kind: OutcomeSent}, {Kind: OutcomeSent}, {Kind: OutcomeSent}, {Kind: OutcomeRetry}}, nil); got != nil {
		t.Errorf("all keyed sent: failed %v, want none", got)
	}
	if held := heldBehind(nil, next, nil); held != nil {
		t.Errorf("no failed keys: held %v", held)
	}
}

// TestNoteHeldRescans: a batch at least half held back sends the next claim
// back to the first id; one mostly published leaves the cursor past it.
func TestNoteHeldRescans(t *testing.T) {
	r := &Relay{}
	r.moveCursor(100)
	r.noteHeld([]bool{true, false, true, false})
	if r.cursor != 0 {
		t.Fatalf("half the batch held: cursor %d, want 0 (claim from the first id)", r.cursor)
	}
	r.moveCursor(100)
	r.noteHeld([]bool{true, false, false})
	if r.cursor != 100 {
		t.Fatalf("a third held: cursor %d, want 100", r.cursor)
	}
}

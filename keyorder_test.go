package outbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

// holdingStore is a fakeStore that keeps key order by holding back the
// messages listed in hold, or fails the check with err.
type holdingStore struct {
	*fakeStore
	hold map[int64]bool
	err  error
}

func (s *holdingStore) HoldBack(_ context.Context, msgs []Message, _ outboxdriver.HoldParams) ([]bool, error) {
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
// back to the first id, even when a claim under way moves the cursor after
// it; one mostly published leaves the cursor past it.
func TestNoteHeldRescans(t *testing.T) {
	r := &Relay{cfg: RelayConfig{RescanInterval: time.Hour}}
	now := time.Now()
	r.moveCursor(100)
	if got := r.claimFrom(now); got != 0 {
		t.Fatalf("first claim from %d, want 0", got) // a fresh relay rescans first
	}
	r.moveCursor(100)
	r.noteHeld([]bool{true, false, true, false})
	r.moveCursor(200) // a claim that was under way ends
	if got := r.claimFrom(now); got != 0 {
		t.Fatalf("half the batch held: next claim from %d, want 0 (the first id)", got)
	}
	r.moveCursor(100)
	r.noteHeld([]bool{true, false, false})
	if got := r.claimFrom(now); got != 100 {
		t.Fatalf("a third held: next claim from %d, want 100", got)
	}
}

// TestKeysDone: the relay remembers, per key, the highest id it saw SENT or
// DEAD, and passes the batch's keys' ids to the check; a retried or released
// message is not done, and a store that keeps no key order gets nothing.
func TestKeysDone(t *testing.T) {
	r := &Relay{store: &holdingStore{}}
	msgs := []Message{{ID: 1, Key: "a"}, {ID: 2, Key: "b"}, {ID: 3, Key: "a"}, {ID: 4, Key: "c"}, {ID: 5, Key: "d"}, {ID: 6}}
	r.noteKeysDone(msgs, []Outcome{{Kind: OutcomeSent}, {Kind: OutcomeDead}, {Kind: OutcomeSent}, {Kind: OutcomeRetry}, {Kind: OutcomeRelease}, {Kind: OutcomeSent}})
	got := r.keysDoneFor([]Message{{ID: 7, Key: "a"}, {ID: 8, Key: "b"}, {ID: 9, Key: "c"}, {ID: 10, Key: "d"}, {ID: 11}})
	if len(got) != 2 || got["a"] != 3 || got["b"] != 2 {
		t.Fatalf("done ids %v, want a:3 b:2", got)
	}
	r.noteKeysDone([]Message{{ID: 2, Key: "a"}}, []Outcome{{Kind: OutcomeSent}})
	if got := r.keysDoneFor([]Message{{ID: 7, Key: "a"}}); got["a"] != 3 {
		t.Fatalf("a lower id moved a's done id to %d, want 3", got["a"])
	}
	plain := &Relay{store: newFakeStore(0)}
	plain.noteKeysDone(msgs[:1], []Outcome{{Kind: OutcomeSent}})
	if got := plain.keysDoneFor(msgs[:1]); got != nil {
		t.Fatalf("a store without key order: done ids %v, want none", got)
	}
}

// spanClaim is a claim that reports where it began (outboxdriver.ClaimSpan).
type spanClaim struct {
	fakeClaim
	from int64
}

func (c *spanClaim) SpanFrom() (int64, bool) { return c.from, true }

func idMsgs(ids ...int64) []Message {
	out := make([]Message, len(ids))
	for i, id := range ids {
		out[i] = Message{ID: id, Key: "k"}
	}
	return out
}

// TestClaimRunWhole: a run of claims vouches for HoldParams.Whole only
// while its claims, with the claim in flight, hold every id from the
// low-water mark on, and no batch of it finished unclean.
func TestClaimRunWhole(t *testing.T) {
	r := &Relay{cfg: RelayConfig{Lease: time.Minute}}
	p := &pipeline{}
	claim := func(from int64, cursor bool, msgs, inflight []Message) bool {
		return p.extendSpan(batch{claim: &spanClaim{from: from}, msgs: msgs, fromCursor: cursor, start: time.Now()}, inflight)
	}
	steps := []struct {
		name string
		got  func() bool
		want bool
	}{
		{"from the mark, every id", func() bool { return claim(10, false, idMsgs(11, 12, 13), nil) }, true},
		{"from the cursor the run left", func() bool { return claim(13, true, idMsgs(14, 15), nil) }, true},
		{"a gap", func() bool { return claim(15, true, idMsgs(16, 18), nil) }, false},
		{"from the cursor after a gap", func() bool { return claim(18, true, idMsgs(19, 20), nil) }, false},
		{"from the mark, the claim in flight fills the span", func() bool {
			return claim(20, false, idMsgs(19, 24, 25), idMsgs(21, 22, 23))
		}, true},
		{"from another cursor", func() bool { return claim(30, true, idMsgs(31), nil) }, false},
		{"from the mark again", func() bool { return claim(30, false, idMsgs(31, 32), nil) }, true},
		{"after a clean batch", func() bool {
			p.breakSpan(r, batch{start: time.Now()}, []Outcome{{Kind: OutcomeSent}, {Kind: OutcomeRetry}, {Kind: OutcomeDead}}, nil)
			return claim(32, true, idMsgs(33), nil)
		}, true},
		{"after a released message", func() bool {
			p.breakSpan(r, batch{start: time.Now()}, []Outcome{{Kind: OutcomeSent}, {Kind: OutcomeRelease}}, nil)
			return claim(33, true, idMsgs(34), nil)
		}, false},
		{"from the mark after the release", func() bool { return claim(34, false, idMsgs(35), nil) }, true},
		{"after a failed mark", func() bool {
			p.breakSpan(r, batch{start: time.Now()}, []Outcome{{Kind: OutcomeSent}}, errors.New("connection lost"))
			return claim(35, true, idMsgs(36), nil)
		}, false},
		{"from the mark after the failed mark", func() bool { return claim(36, false, idMsgs(37), nil) }, true},
		{"after a mark late in its lease", func() bool {
			p.breakSpan(r, batch{start: time.Now().Add(-40 * time.Second)}, []Outcome{{Kind: OutcomeSent}}, nil)
			return claim(37, true, idMsgs(38), nil)
		}, false},
		{"from the mark after an abort", func() bool {
			claim(38, false, idMsgs(39), nil)
			p.breakSpan(r, batch{start: time.Now()}, nil, errNotAttempted)
			return claim(39, true, idMsgs(40), nil)
		}, false},
		{"a claim that cannot tell", func() bool {
			claim(40, false, idMsgs(41), nil)
			return p.extendSpan(batch{claim: &fakeClaim{}, msgs: idMsgs(42), fromCursor: true}, nil)
		}, false},
	}
	for _, st := range steps {
		if got := st.got(); got != st.want {
			t.Errorf("%s: whole = %v, want %v", st.name, got, st.want)
		}
	}
}

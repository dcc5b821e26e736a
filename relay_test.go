package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

// fakeStore is an in-memory Store for unit tests of the relay's logic only;
// every driver's real behaviour is tested by package drivertest.
type fakeStore struct {
	mu       sync.Mutex
	rows     []Message      // by id
	held     map[int64]bool // ids in an open claim, which other claims skip
	afterIDs []int64        // AfterID of every claim
	finished [][]Outcome
	marks    int // Finish calls of non-empty claims, failed or not
	// lateMarks counts the marks that came after their claim's lease ended.
	lateMarks int
	aborted   int
	// failMark, when set, is asked by Finish call number n (from 1, non-empty
	// claims only) whether it fails; a failed Finish releases the rows as
	// they were, as a rolled-back transaction does.
	failMark func(n int) bool
	onClaim  func(n int) // called (unlocked) after claim number n, from 1
	// claimDelay and finishDelay lengthen every claim and every Finish of a
	// batch; spans records when each ran.
	claimDelay, finishDelay time.Duration
	spans                   []span
}

// span is when one claim, publish or mark ran.
type span struct {
	kind       string
	start, end time.Time
}

func overlaps(a, b span) bool { return a.start.Before(b.end) && b.start.Before(a.end) }

func (s *fakeStore) record(kind string, start time.Time) {
	s.mu.Lock()
	s.spans = append(s.spans, span{kind, start, time.Now()})
	s.mu.Unlock()
}

func newFakeStore(n int) *fakeStore {
	s := &fakeStore{held: map[int64]bool{}}
	for i := 1; i <= n; i++ {
		s.rows = append(s.rows, Message{ID: int64(i), MsgID: fmt.Sprintf("m-%d", i), Topic: "t"})
	}
	return s
}

func (s *fakeStore) Dialect() string                            { return "fake" }
func (s *fakeStore) Tables() Tables                             { return Tables{}.WithDefaults() }
func (s *fakeStore) Migrate(context.Context) error              { return nil }
func (s *fakeStore) SchemaVersion(context.Context) (int, error) { return 1, nil }
func (s *fakeStore) Stats(context.Context) (Stats, error)       { return Stats{}, nil }
func (s *fakeStore) ListMessages(context.Context, ListFilter) ([]Message, error) {
	return nil, nil
}
func (s *fakeStore) GetMessage(context.Context, string) (Message, error) {
	return Message{}, ErrNotFound
}
func (s *fakeStore) RetryDead(context.Context, DeadFilter, string) (int64, error) {
	return 0, nil
}
func (s *fakeStore) DropDead(context.Context, DeadFilter) (int64, error) { return 0, nil }
func (s *fakeStore) DeleteSent(context.Context, time.Duration, int) (int64, error) {
	return 0, nil
}
func (s *fakeStore) DeleteConsumed(context.Context, time.Duration, int) (int64, error) {
	return 0, nil
}

func (s *fakeStore) Claim(_ context.Context, p outboxdriver.ClaimParams) (outboxdriver.Claim, error) {
	start := time.Now()
	time.Sleep(s.claimDelay)
	defer s.record("claim", start)
	s.mu.Lock()
	s.afterIDs = append(s.afterIDs, p.AfterID)
	n := len(s.afterIDs)
	var out []Message
	for _, m := range s.rows {
		if m.Status == StatusNew && m.ID > p.AfterID && !s.held[m.ID] && len(out) < p.Limit {
			out = append(out, m)
			s.held[m.ID] = true
		}
	}
	s.mu.Unlock()
	if s.onClaim != nil {
		s.onClaim(n)
	}
	return &fakeClaim{s: s, msgs: out, claimed: start, lease: p.Lease}, nil
}

type fakeClaim struct {
	s       *fakeStore
	msgs    []Message
	claimed time.Time
	lease   time.Duration
}

func (c *fakeClaim) Messages() []Message { return c.msgs }

func (c *fakeClaim) Abort(context.Context) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.release()
	c.s.aborted++
	return nil
}

func (c *fakeClaim) release() {
	for _, m := range c.msgs {
		delete(c.s.held, m.ID)
	}
}

func (c *fakeClaim) Finish(_ context.Context, outcomes []Outcome) error {
	if len(c.msgs) > 0 {
		start := time.Now()
		time.Sleep(c.s.finishDelay)
		defer c.s.record("mark", start)
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	c.release()
	if len(c.msgs) == 0 {
		return nil
	}
	c.s.marks++
	if time.Since(c.claimed) >= c.lease {
		c.s.lateMarks++
	}
	if c.s.failMark != nil && c.s.failMark(c.s.marks) {
		return errors.New("connection reset")
	}
	c.s.finished = append(c.s.finished, outcomes)
	for i, o := range outcomes {
		r := &c.s.rows[c.msgs[i].ID-1]
		switch o.Kind {
		case OutcomeSent:
			r.Status = StatusSent
		case OutcomeRetry:
			r.Retries++
		case OutcomeDead:
			r.Retries++
			r.Status = StatusDead
		}
	}
	return nil
}

// logBuffer collects log lines written from several goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// runUntil runs r until until() holds (or, as a safety net, within has
// passed, after which the test's own checks fail), stops it, and returns
// Run's error.
func runUntil(r *Relay, within time.Duration, until func() bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(within)
	for !until() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	return <-done
}

// batchesFinished counts the non-empty claims finished so far.
func (s *fakeStore) batchesFinished() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.finished)
}

func TestRelayCursor(t *testing.T) {
	st := newFakeStore(25)
	r, err := NewRelay(st, Discard, RelayConfig{BatchSize: 10, RescanInterval: time.Hour, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := r.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Full batches move the cursor; a short one sends the next claim back to
	// the first id, so that rows left below the cursor are never skipped.
	want := []int64{0, 10, 20, 0, 0}
	if fmt.Sprint(st.afterIDs) != fmt.Sprint(want) {
		t.Fatalf("claims started after %v, want %v", st.afterIDs, want)
	}
}

// Run does not idle after a short batch that started past the cursor: rows
// below it may be due, so it claims from the first id at once.
func TestRelayRunRescansAtOnce(t *testing.T) {
	st := newFakeStore(25)
	r, _ := NewRelay(st, Discard, RelayConfig{BatchSize: 10, Interval: time.Hour, MinInterval: time.Hour, RescanInterval: time.Hour, Logger: quiet()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st.mu.Lock()
		n := len(st.afterIDs)
		st.mu.Unlock()
		if n >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a fifth claim now would mean no idle wait
	cancel()
	<-done
	st.mu.Lock()
	defer st.mu.Unlock()
	// 0 (10 rows), 10 (10), 20 (5: short, from the cursor), 0 at once (empty),
	// then the relay idles for Interval.
	if got := fmt.Sprint(st.afterIDs); got != "[0 10 20 0]" {
		t.Fatalf("claims started after %s, want [0 10 20 0] and then an idle wait", got)
	}
}

func TestRelayRescanInterval(t *testing.T) {
	st := newFakeStore(100)
	r, _ := NewRelay(st, Discard, RelayConfig{BatchSize: 10, RescanInterval: 30 * time.Millisecond, Logger: quiet()})
	ctx := context.Background()
	r.RunOnce(ctx)
	r.RunOnce(ctx)
	time.Sleep(40 * time.Millisecond)
	r.RunOnce(ctx)
	if got := st.afterIDs; got[0] != 0 || got[1] != 10 || got[2] != 0 {
		t.Fatalf("claims started after %v; want a claim from the first id once RescanInterval passed", got)
	}
}

func TestRelayOutcomes(t *testing.T) {
	st := newFakeStore(5)
	st.rows[3].Retries = 2 // the next failure is its third
	boom := errors.New("refused")
	pub := BatchPublishFunc(func(_ context.Context, msgs []Message) []error {
		return []error{nil, boom, Unavailable(errors.New("down")), boom, fmt.Errorf("wrapped: %w", ErrHeldBack)}
	})
	r, _ := NewRelay(st, pub, RelayConfig{MaxRetries: 3, RetryBase: time.Second, RetryMax: time.Minute, Logger: quiet()})
	rep, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	kinds := []OutcomeKind{OutcomeSent, OutcomeRetry, OutcomeRelease, OutcomeDead, OutcomeRelease}
	for i, k := range kinds {
		if got := st.finished[0][i].Kind; got != k {
			t.Errorf("message %d: outcome %d, want %d", i, got, k)
		}
	}
	if rep.Sent != 1 || rep.Retried != 1 || rep.Dead != 1 || rep.Released != 2 {
		t.Fatalf("report = %+v", rep)
	}
	if d := st.finished[0][1].Delay; d < 500*time.Millisecond || d > time.Second {
		t.Fatalf("first retry delay %s, want within [RetryBase/2, RetryBase]", d)
	}
	if st.finished[0][3].Error != "refused" {
		t.Fatalf("dead message error %q", st.finished[0][3].Error)
	}
}

func TestRelayBackoff(t *testing.T) {
	r, _ := NewRelay(newFakeStore(0), Discard, RelayConfig{RetryBase: time.Second, RetryMax: 10 * time.Second, Logger: quiet()})
	for attempt, max := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second} {
		for range 50 {
			d := r.backoff(attempt)
			if d < max/2 || d > max {
				t.Fatalf("attempt %d: delay %s outside [%s, %s]", attempt, d, max/2, max)
			}
		}
	}
	if d := r.backoff(200); d < 5*time.Second || d > 10*time.Second {
		t.Fatalf("huge attempt: %s, want capped", d)
	}
}

func TestRelayPublisherContract(t *testing.T) {
	for name, pub := range map[string]Publisher{
		"short answer": BatchPublishFunc(func(context.Context, []Message) []error { return []error{nil} }),
		"panic":        BatchPublishFunc(func(context.Context, []Message) []error { panic("bug") }),
	} {
		st := newFakeStore(3)
		r, _ := NewRelay(st, pub, RelayConfig{Logger: quiet()})
		rep, err := r.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rep.Released != 3 || rep.Retried != 0 || rep.Dead != 0 {
			t.Errorf("%s: %+v; a broken publisher must not spend retries", name, rep)
		}
	}
}

func TestRelayConfigValidation(t *testing.T) {
	st := newFakeStore(0)
	for name, cfg := range map[string]RelayConfig{
		"batch":     {BatchSize: 20000},
		"retries":   {MaxRetries: -1},
		"retry max": {RetryBase: time.Minute, RetryMax: time.Second},
		"lease":     {PublishTimeout: time.Minute, Lease: time.Second},
		"negative":  {Interval: -time.Second},
		"pause max": {PauseBase: time.Minute, PauseMax: time.Second},
		"rescan":    {RescanInterval: -1},
	} {
		if _, err := NewRelay(st, Discard, cfg); err == nil {
			t.Errorf("%s: accepted %+v", name, cfg)
		}
	}
	if _, err := NewRelay(nil, Discard, RelayConfig{}); err == nil {
		t.Error("nil store accepted")
	}
	if _, err := NewRelay(st, Discard, RelayConfig{Hooks: []any{42}}); err == nil {
		t.Error("a hook of no known kind accepted")
	}
}

func TestTablesValidate(t *testing.T) {
	if err := (Tables{}).WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "A", "_ok;", "9x", "a-b", "aé"} {
		if err := outboxdriver.ValidateIdentifier(bad); !errors.Is(err, ErrInvalidIdentifier) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	// An inbox named like something the outbox table brings with it: on
	// SQLite "ob_claims" passed, the migration skipped the claims table,
	// and every claim failed; on PostgreSQL "ob_migrations" passed, and the
	// inbox was missing.
	for _, inbox := range []string{"ob", "ob_claims", "ob_migrations", "ob_horizon", "ob_pending_idx", "ob_requeued_idx", "ob_dead_idx", "ob_msg_id_key", "ob_pkey", "ob_id_seq"} {
		if err := (Tables{Outbox: "ob", Inbox: inbox}).Validate(); !errors.Is(err, ErrInvalidIdentifier) {
			t.Errorf("outbox ob, inbox %q: %v", inbox, err)
		}
	}
	for _, inbox := range []string{"ob_inbox", "claims", "ob_claims_log", "consumed_msg"} {
		if err := (Tables{Outbox: "ob", Inbox: inbox}).Validate(); err != nil {
			t.Errorf("outbox ob, inbox %q: %v", inbox, err)
		}
	}
}

func TestPublishFuncHoldsBackKey(t *testing.T) {
	var called []string
	pub := PublishFunc(func(_ context.Context, m Message) error {
		called = append(called, m.MsgID)
		if m.MsgID == "a1" {
			return errors.New("refused")
		}
		return nil
	})
	errs := pub.Publish(context.Background(), []Message{
		{MsgID: "a1", Key: "a"}, {MsgID: "b1", Key: "b"}, {MsgID: "a2", Key: "a"}, {MsgID: "n1"}, {MsgID: "a3", Key: "a"},
	})
	if fmt.Sprint(called) != "[a1 b1 n1]" {
		t.Fatalf("published %v; a2 and a3 must wait behind a1", called)
	}
	if errs[0] == nil || errs[1] != nil || !errors.Is(errs[2], ErrHeldBack) || errs[3] != nil || !errors.Is(errs[4], ErrHeldBack) {
		t.Fatalf("errors = %v", errs)
	}
	if pub.Publish(context.Background(), []Message{{MsgID: "x"}}) != nil {
		t.Fatal("a batch with no failure must return nil")
	}
}

// Run claims the next batch while the broker still has the previous one, and
// publishes the batches one at a time, in claim order.
func TestRelayRunOverlapsClaimAndPublish(t *testing.T) {
	st := newFakeStore(50)
	fourthClaim := make(chan struct{})
	var once sync.Once
	st.onClaim = func(n int) {
		if n == 4 {
			once.Do(func() { close(fourthClaim) })
		}
	}
	var (
		mu        sync.Mutex
		inFlight  int
		overlap   bool
		published []int64
		waited    bool
	)
	pub := BatchPublishFunc(func(ctx context.Context, msgs []Message) []error {
		mu.Lock()
		inFlight++
		if inFlight > 1 {
			overlap = true
		}
		for _, m := range msgs {
			published = append(published, m.ID)
		}
		mu.Unlock()
		time.Sleep(3 * time.Millisecond)
		if msgs[0].ID == 21 {
			// The third batch is acked only once the fourth is claimed.
			select {
			case <-fourthClaim:
				waited = true
			case <-time.After(5 * time.Second):
			}
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	})
	r, _ := NewRelay(st, pub, RelayConfig{BatchSize: 10, Interval: time.Hour, RescanInterval: time.Hour, Logger: quiet()})
	if err := runUntil(r, 10*time.Second, func() bool { return st.batchesFinished() >= 5 }); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !waited {
		t.Fatal("the fourth batch was not claimed while the third was being published")
	}
	if overlap {
		t.Fatal("two Publish calls ran at once")
	}
	if len(published) != 50 {
		t.Fatalf("published %d messages, want 50 (each once)", len(published))
	}
	for i, id := range published {
		if id != int64(i+1) {
			t.Fatalf("published ids %v, want 1..50 in order", published)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, m := range st.rows {
		if m.Status != StatusSent {
			t.Fatalf("message %d is %v after Run", m.ID, m.Status)
		}
	}
}

// A batch claimed while a slow broker holds the previous one publishes only
// if its publish can end early enough in its lease for the mark to follow
// within it; otherwise it is released. A mark past the lease could finish
// rows that another relay (SQLite) has claimed again and is publishing.
func TestRelayRunMarksWithinTheLease(t *testing.T) {
	st := newFakeStore(20)
	pub := BatchPublishFunc(func(ctx context.Context, msgs []Message) []error {
		select {
		case <-time.After(550 * time.Millisecond):
			return nil
		case <-ctx.Done():
			errs := make([]error, len(msgs))
			for i := range errs {
				errs[i] = Unavailable(ctx.Err())
			}
			return errs
		}
	})
	r, err := NewRelay(st, pub, RelayConfig{BatchSize: 10, PublishTimeout: 600 * time.Millisecond, Lease: time.Second,
		Interval: time.Hour, RescanInterval: time.Hour, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := runUntil(r, 10*time.Second, func() bool { return st.batchesFinished() >= 2 }); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.lateMarks != 0 {
		t.Fatalf("%d of %d marks came after their claim's lease had ended", st.lateMarks, st.marks)
	}
	if st.aborted == 0 {
		t.Fatal("the batch that waited behind the slow one was not released")
	}
}

// overlapStore is a fakeStore that asks Run for less overlap, and notes
// whether a claim ever ran beside an open claim or a running mark.
type overlapStore struct {
	*fakeStore
	mode outboxdriver.ClaimOverlap
}

func (s overlapStore) ClaimOverlap() outboxdriver.ClaimOverlap { return s.mode }

// A mark that fails pauses the relay; its rows stay due and are published
// again, and the batches published meanwhile keep their marks.
func TestRelayRunMarkFailurePauses(t *testing.T) {
	st := newFakeStore(40)
	st.failMark = func(n int) bool { return n == 2 }
	sent := map[int64]int{}
	var mu sync.Mutex
	pub := BatchPublishFunc(func(ctx context.Context, msgs []Message) []error {
		time.Sleep(time.Millisecond)
		mu.Lock()
		for _, m := range msgs {
			sent[m.ID]++
		}
		mu.Unlock()
		return nil
	})
	var logs logBuffer
	r, _ := NewRelay(st, pub, RelayConfig{BatchSize: 10, Interval: 5 * time.Millisecond,
		PauseBase: 30 * time.Millisecond, PauseMax: 30 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	_ = runUntil(r, 5*time.Second, func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		for _, m := range st.rows {
			if m.Status != StatusSent {
				return false
			}
		}
		return true
	})
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, m := range st.rows {
		want := 1
		if m.ID > 10 && m.ID <= 20 {
			want = 2 // the batch whose mark failed
		}
		if m.Status != StatusSent || m.Retries != 0 || sent[m.ID] != want {
			t.Fatalf("message %d: status %v, retries %d, published %d times; want SENT, 0, %d", m.ID, m.Status, m.Retries, sent[m.ID], want)
		}
	}
	if !strings.Contains(logs.String(), "batch failed; pausing") {
		t.Fatalf("the failed mark was not logged as a pause:\n%s", logs.String())
	}
}

// A store that implements ClaimOverlapper gets no more overlap than it asks
// for: OverlapPublish never has a claim beside a mark, OverlapNone never has
// two claims open.
func TestRelayRunClaimOverlap(t *testing.T) {
	for _, mode := range []outboxdriver.ClaimOverlap{outboxdriver.OverlapPublish, outboxdriver.OverlapNone} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			st := newFakeStore(60)
			// A claim slower than a publish, so that with full overlap a
			// claim would also run beside the mark that follows the publish.
			st.claimDelay, st.finishDelay = 4*time.Millisecond, 2*time.Millisecond
			pub := BatchPublishFunc(func(ctx context.Context, msgs []Message) []error {
				start := time.Now()
				time.Sleep(time.Millisecond)
				st.record("publish", start)
				return nil
			})
			r, _ := NewRelay(overlapStore{st, mode}, pub, RelayConfig{BatchSize: 10, Interval: time.Hour, Logger: quiet()})
			_ = runUntil(r, 5*time.Second, func() bool { return st.batchesFinished() >= 6 })
			st.mu.Lock()
			defer st.mu.Unlock()
			if len(st.finished) != 6 {
				t.Fatalf("%d batches finished, want 6", len(st.finished))
			}
			var besideMark, besidePublish bool
			for _, c := range st.spans {
				if c.kind != "claim" {
					continue
				}
				for _, o := range st.spans {
					besideMark = besideMark || (o.kind == "mark" && overlaps(c, o))
					besidePublish = besidePublish || (o.kind == "publish" && overlaps(c, o))
				}
			}
			if besideMark {
				t.Fatal("a claim ran beside a mark")
			}
			switch {
			case mode == outboxdriver.OverlapNone && besidePublish:
				t.Fatal("a claim ran beside a publish")
			case mode == outboxdriver.OverlapPublish && !besidePublish:
				t.Fatal("no claim ran beside a publish: Run did not overlap at all")
			}
		})
	}
}

// When the broker is unreachable, the batch claimed behind the failing one is
// released unpublished, no retry is spent, and everything goes out once the
// broker is back.
func TestRelayRunPauseReleasesNextBatch(t *testing.T) {
	st := newFakeStore(30)
	var mu sync.Mutex
	calls := 0
	sent := map[int64]int{}
	pub := BatchPublishFunc(func(ctx context.Context, msgs []Message) []error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		time.Sleep(3 * time.Millisecond)
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			if calls == 2 {
				errs[i] = Unavailable(errors.New("connection refused"))
				continue
			}
			sent[m.ID]++
		}
		if calls == 2 {
			time.Sleep(20 * time.Millisecond) // let the next claim happen
		}
		return errs
	})
	r, _ := NewRelay(st, pub, RelayConfig{BatchSize: 10, Interval: 5 * time.Millisecond,
		PauseBase: 30 * time.Millisecond, PauseMax: 30 * time.Millisecond, Logger: quiet()})
	_ = runUntil(r, 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(sent) >= 30
	})
	mu.Lock()
	defer mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.aborted == 0 {
		t.Fatal("the batch claimed during the failing publish was not released")
	}
	for _, m := range st.rows {
		if m.Status != StatusSent || m.Retries != 0 || sent[m.ID] != 1 {
			t.Fatalf("message %d: status %v, retries %d, published %d times; want SENT, 0, 1", m.ID, m.Status, m.Retries, sent[m.ID])
		}
	}
}

// A stop while a batch is being published finishes that batch, releases the
// one claimed behind it, and returns nil.
func TestRelayRunStopFinishesBatchInFlight(t *testing.T) {
	st := newFakeStore(30)
	claimed := make(chan struct{})
	var once sync.Once
	st.onClaim = func(n int) {
		if n == 3 {
			once.Do(func() { close(claimed) })
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	pub := BatchPublishFunc(func(pctx context.Context, msgs []Message) []error {
		time.Sleep(3 * time.Millisecond)
		if msgs[0].ID == 11 {
			select {
			case <-claimed:
			case <-time.After(5 * time.Second):
				t.Error("the third batch was not claimed while the second was published")
			}
			cancel() // the stop arrives while this batch is with the broker
			time.Sleep(20 * time.Millisecond)
			if pctx.Err() != nil {
				t.Error("the batch in flight lost its context on stop")
			}
		}
		return nil
	})
	r, _ := NewRelay(st, pub, RelayConfig{BatchSize: 10, Logger: quiet()})
	if err := r.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.finished) != 2 || len(st.held) != 0 || st.aborted != 1 {
		t.Fatalf("%d batches finished, %d aborted and %d rows still held; want two finished, the third released and nothing held",
			len(st.finished), st.aborted, len(st.held))
	}
	for _, m := range st.rows {
		if want := m.ID <= 20; (m.Status == StatusSent) != want {
			t.Fatalf("message %d is %v after the stop", m.ID, m.Status)
		}
	}
}

// A batch's report splits its time into the claim, the publish and the mark.
func TestRelayReportsStageDurations(t *testing.T) {
	st := newFakeStore(5)
	st.claimDelay, st.finishDelay = 6*time.Millisecond, 3*time.Millisecond
	pub := BatchPublishFunc(func(ctx context.Context, msgs []Message) []error {
		time.Sleep(9 * time.Millisecond)
		return nil
	})
	r, _ := NewRelay(st, pub, RelayConfig{Logger: quiet()})
	rep, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.ClaimDuration < 6*time.Millisecond || rep.PublishDuration < 9*time.Millisecond || rep.MarkDuration < 3*time.Millisecond {
		t.Fatalf("claim %v, publish %v, mark %v; want at least 6ms, 9ms and 3ms", rep.ClaimDuration, rep.PublishDuration, rep.MarkDuration)
	}
	// The publisher's sleep tells the stages apart: neither neighbour took it.
	if rep.ClaimDuration >= 9*time.Millisecond+6*time.Millisecond || rep.MarkDuration >= 9*time.Millisecond+3*time.Millisecond {
		t.Fatalf("claim %v or mark %v includes the publish", rep.ClaimDuration, rep.MarkDuration)
	}
	if sum := rep.ClaimDuration + rep.PublishDuration + rep.MarkDuration; sum > rep.Duration {
		t.Fatalf("the stages add up to %v, more than the batch's %v", sum, rep.Duration)
	}
}

func TestRetryAfter(t *testing.T) {
	base := errors.New("slow down")
	err := WithRetryAfter(base, 2*time.Second)
	if got := RetryAfter(fmt.Errorf("publish: %w", Unavailable(err))); got != 2*time.Second {
		t.Errorf("RetryAfter through Unavailable and a wrap = %s, want 2s", got)
	}
	if err.Error() != "slow down" || !errors.Is(err, base) {
		t.Errorf("WithRetryAfter changed the error: %q", err)
	}
	if WithRetryAfter(nil, time.Second) != nil {
		t.Error("WithRetryAfter(nil) is not nil")
	}
	if WithRetryAfter(base, 0) != base || WithRetryAfter(base, -time.Second) != base {
		t.Error("WithRetryAfter with no wait wrapped the error")
	}
	if RetryAfter(nil) != 0 || RetryAfter(base) != 0 {
		t.Error("RetryAfter of an error without a wait is not 0")
	}
}

// An unavailable error that carries a Retry-After keeps the relay away for
// that long, even when its own pause is shorter; a longer one is cut to
// PauseMax.
func TestRelayRunHonoursRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name            string
		retryAfter      time.Duration
		pauseMax        time.Duration
		atLeast, atMost time.Duration
	}{
		{"longer than the pause", 300 * time.Millisecond, time.Second, 300 * time.Millisecond, 900 * time.Millisecond},
		{"capped at PauseMax", time.Hour, 200 * time.Millisecond, 200 * time.Millisecond, 800 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newFakeStore(3)
			var (
				mu        sync.Mutex
				calls     []time.Time // when each Publish started
				refusedAt time.Time   // when the first one returned
			)
			pub := BatchPublishFunc(func(ctx context.Context, msgs []Message) []error {
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, time.Now())
				if len(calls) > 1 {
					return nil
				}
				errs := make([]error, len(msgs))
				for i := range errs {
					errs[i] = Unavailable(WithRetryAfter(errors.New("429 Too Many Requests"), tc.retryAfter))
				}
				refusedAt = time.Now()
				return errs
			})
			r, _ := NewRelay(st, pub, RelayConfig{BatchSize: 1, Interval: time.Millisecond,
				PauseBase: 5 * time.Millisecond, PauseMax: tc.pauseMax, Logger: quiet()})
			_ = runUntil(r, 5*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(calls) >= 2
			})
			mu.Lock()
			defer mu.Unlock()
			if len(calls) < 2 {
				t.Fatalf("the relay did not come back within 5s (retry after %s, PauseMax %s)", tc.retryAfter, tc.pauseMax)
			}
			if gap := calls[1].Sub(refusedAt); gap < tc.atLeast || gap > tc.atMost {
				t.Fatalf("the relay published again %s after the broker asked for %s (PauseMax %s); want within [%s, %s]",
					gap, tc.retryAfter, tc.pauseMax, tc.atLeast, tc.atMost)
			}
		})
	}
}

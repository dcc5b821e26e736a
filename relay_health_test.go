package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// brokerSim is a publisher whose broker can be down, refuse everything, or
// drop the connection on one message (and so fail every later message of
// the same call), for the relay's health logic.
type brokerSim struct {
	mu        sync.Mutex
	down      bool   // every message unavailable
	refuseAll error  // every message refused with this error
	poison    string // msg_id that breaks the connection
	delivered map[string]int
	calls     int
	backAt    time.Time // when down or refuseAll last went off
	firstSent time.Time // first message delivered after backAt
}

func newBrokerSim() *brokerSim { return &brokerSim{delivered: map[string]int{}} }

func (b *brokerSim) Publish(_ context.Context, msgs []Message) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	errs := make([]error, len(msgs))
	broken := false
	for i, m := range msgs {
		switch {
		case b.down || broken:
			errs[i] = Unavailable(errors.New("connection refused"))
		case b.refuseAll != nil:
			errs[i] = fmt.Errorf("webhook: POST http://h/%s: %w", m.MsgID, b.refuseAll)
		case m.MsgID == b.poison:
			broken = true
			errs[i] = Unavailable(errors.New("connection reset by peer"))
		default:
			b.delivered[m.MsgID]++
			if !b.backAt.IsZero() && b.firstSent.IsZero() {
				b.firstSent = time.Now()
			}
		}
	}
	return errs
}

func (b *brokerSim) set(f func(b *brokerSim)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b)
}

func (b *brokerSim) deliveredCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.delivered)
}

// healthStore is a fake store whose rows were written now, so that the
// retry budget applies.
func healthStore(n int) *fakeStore {
	st := newFakeStore(n)
	now := time.Now()
	for i := range st.rows {
		st.rows[i].CreatedAt = now
	}
	return st
}

func (s *fakeStore) status(id int64) (Status, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[id-1]
	return r.Status, r.Retries
}

func (s *fakeStore) totals() (sent, dead, retries int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rows {
		switch r.Status {
		case StatusSent:
			sent++
		case StatusDead:
			dead++
		}
		retries += r.Retries
	}
	return
}

// A message that breaks the connection (and so fails every message after it
// in the same call) is found, charged and made DEAD; every other message is
// delivered once, and the relay never stalls.
func TestRelayIsolatesMessageThatBreaksTheConnection(t *testing.T) {
	st := healthStore(200)
	pub := newBrokerSim()
	pub.poison = "m-77"
	var logs logBuffer
	r, _ := NewRelay(st, pub, RelayConfig{BatchSize: 50, Interval: time.Millisecond, MaxRetries: 3, RetryBudget: -1,
		PauseBase: time.Millisecond, ProbeInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	_ = runUntil(r, 10*time.Second, func() bool {
		s, _ := st.status(77)
		return pub.deliveredCount() == 199 && s == StatusDead
	})
	if s, n := st.status(77); s != StatusDead || n != 3 {
		t.Fatalf("the poison message: status %v after %d retries; want DEAD after 3\n%s", s, n, logs.String())
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	for i := 1; i <= 200; i++ {
		id := fmt.Sprintf("m-%d", i)
		if want := 1; i != 77 && pub.delivered[id] != want {
			t.Fatalf("%s delivered %d times, want once", id, pub.delivered[id])
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, m := range st.rows {
		if m.ID != 77 && (m.Status != StatusSent || m.Retries != 0) {
			t.Fatalf("message %d: status %v, retries %d; want SENT with no retry spent", m.ID, m.Status, m.Retries)
		}
	}
	var last string
	for i := len(st.finished) - 1; i >= 0 && last == ""; i-- {
		for _, o := range st.finished[i] {
			if o.Kind == OutcomeDead {
				last = o.Error
			}
		}
	}
	if !strings.Contains(last, "broke the connection") {
		t.Fatalf("last_error of the poison = %q; want it to say that it broke the connection", last)
	}
	if strings.Contains(logs.String(), "broker outage") {
		t.Fatalf("a poison message was taken for an outage:\n%s", logs.String())
	}
}

// An outage (every message unavailable) spends no retries, kills nothing,
// and the relay resumes within about ProbeInterval of the broker's return.
func TestRelayOutageSpendsNoRetries(t *testing.T) {
	st := healthStore(100)
	pub := newBrokerSim()
	pub.down = true
	var logs logBuffer
	r, _ := NewRelay(st, pub, RelayConfig{BatchSize: 20, Interval: time.Millisecond, MaxRetries: 1, RetryBudget: -1,
		PauseBase: 5 * time.Millisecond, PauseMax: time.Second, ProbeInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	go func() {
		time.Sleep(400 * time.Millisecond)
		pub.set(func(b *brokerSim) { b.down, b.backAt = false, time.Now() })
	}()
	_ = runUntil(r, 10*time.Second, func() bool { return pub.deliveredCount() == 100 })
	sent, dead, retries := st.totals()
	if sent != 100 || dead != 0 || retries != 0 {
		t.Fatalf("after the outage: %d sent, %d dead, %d retries spent; want 100, 0, 0\n%s", sent, dead, retries, logs.String())
	}
	pub.mu.Lock()
	resumed := pub.firstSent.Sub(pub.backAt)
	pub.mu.Unlock()
	if resumed > 200*time.Millisecond {
		t.Fatalf("the relay resumed %s after the broker came back; want within about ProbeInterval (50ms)", resumed)
	}
	if n := strings.Count(logs.String(), "broker outage"); n != 1 {
		t.Fatalf("the outage was logged %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "broker is back") {
		t.Fatalf("the end of the outage was not logged:\n%s", logs.String())
	}
}

// Many messages refused alike (a receiver answering 500 while its own
// database is down) is an outage: at most the first few refusals spend a
// retry, nothing goes DEAD even with MaxRetries 1, and all is delivered
// once the receiver recovers.
func TestRelayRefusalOutage(t *testing.T) {
	st := healthStore(60)
	pub := newBrokerSim()
	pub.refuseAll = errors.New("500 Internal Server Error: database unavailable")
	r, _ := NewRelay(st, pub, RelayConfig{BatchSize: 1, Interval: time.Millisecond, MaxRetries: 1,
		RetryBudget: time.Hour, RetryBase: time.Millisecond, PauseBase: 5 * time.Millisecond,
		ProbeInterval: 20 * time.Millisecond, Logger: quiet()})
	go func() {
		time.Sleep(400 * time.Millisecond)
		pub.set(func(b *brokerSim) { b.refuseAll = nil })
	}()
	_ = runUntil(r, 10*time.Second, func() bool { return pub.deliveredCount() == 60 })
	sent, dead, retries := st.totals()
	if sent != 60 || dead != 0 || retries > outageStreak {
		t.Fatalf("%d sent, %d dead, %d retries spent; want 60, 0, at most %d", sent, dead, retries, outageStreak)
	}
	pub.mu.Lock()
	calls := pub.calls
	pub.mu.Unlock()
	// 400ms of outage probed every 20ms: about 20 probes, not thousands of
	// claims.
	if calls > 60+60 {
		t.Fatalf("%d publish calls for 60 messages and a 400ms outage; the relay did not pause", calls)
	}
}

// One message refused while the others go through is a refusal of its own:
// it spends its retries and goes DEAD once its budget is spent.
func TestRelayRefusalOfOneMessage(t *testing.T) {
	st := healthStore(30)
	pub := PublishFunc(func(_ context.Context, m Message) error {
		if m.MsgID == "m-5" {
			return errors.New("400 Bad Request: m-5 does not fit the schema")
		}
		return nil
	})
	r, _ := NewRelay(st, pub, RelayConfig{BatchSize: 10, Interval: time.Millisecond, MaxRetries: 2, RetryBudget: -1,
		RetryBase: time.Millisecond, Logger: quiet()})
	_ = runUntil(r, 5*time.Second, func() bool { s, _ := st.status(5); return s == StatusDead })
	if s, n := st.status(5); s != StatusDead || n != 2 {
		t.Fatalf("message 5: %v after %d retries, want DEAD after 2", s, n)
	}
}

// The retry budget keeps a refused message alive until it has passed,
// however many retries it spent; a message the transport can never carry is
// DEAD at once.
func TestRelayRetryBudget(t *testing.T) {
	r, _ := NewRelay(newFakeStore(0), Discard, RelayConfig{MaxRetries: 2, RetryBudget: time.Hour, RetryMax: time.Minute, Logger: quiet()})
	refused := errors.New("refused")
	young := Message{Retries: 5, CreatedAt: time.Now().Add(-time.Minute)}
	if o := r.outcome(young, refused); o.Kind != OutcomeRetry || o.Delay > time.Minute {
		t.Fatalf("within the budget: %+v; want a retry at most RetryMax away", o)
	}
	old := Message{Retries: 5, CreatedAt: time.Now().Add(-2 * time.Hour)}
	if o := r.outcome(old, refused); o.Kind != OutcomeDead {
		t.Fatalf("past the budget and MaxRetries: %+v; want DEAD", o)
	}
	fresh := Message{CreatedAt: time.Now()}
	if o := r.outcome(fresh, Undeliverable(errors.New("header over 255 bytes"))); o.Kind != OutcomeDead || !strings.Contains(o.Error, "255 bytes") {
		t.Fatalf("undeliverable: %+v; want DEAD at once with the reason", o)
	}
	if o := r.outcome(Message{Retries: 0, CreatedAt: time.Now().Add(-2 * time.Hour)}, refused); o.Kind != OutcomeRetry {
		t.Fatalf("past the budget but with retries left: %+v; want a retry", o)
	}
}

func TestErrorSignature(t *testing.T) {
	a := Message{MsgID: "order-1:paid", Topic: "orders", Key: "c-9"}
	b := Message{MsgID: "order-22:paid", Topic: "invoices", Key: "c-12"}
	ea := fmt.Errorf("POST /orders: 503 for order-1:paid (key c-9) after 120ms")
	eb := fmt.Errorf("POST /invoices: 502 for order-22:paid (key c-12) after 98ms")
	if sa, sb := errorSignature(a, ea), errorSignature(b, eb); sa != sb {
		t.Fatalf("signatures differ:\n%q\n%q", sa, sb)
	}
	if errorSignature(a, errors.New("no route")) == errorSignature(a, errors.New("queue full")) {
		t.Fatal("different errors gave one signature")
	}
}

// A publisher's error that quotes a URL with credentials is stored masked:
// last_error is served by `outbox dead show` and the admin API.
func TestRelayMasksSecretsInLastError(t *testing.T) {
	st := healthStore(1)
	pub := PublishFunc(func(context.Context, Message) error {
		return errors.New(`POST https://hook:s3cr3t@example.com/in?token=abc123: 400 Bad Request`)
	})
	r, _ := NewRelay(st, pub, RelayConfig{MaxRetries: 1, RetryBudget: -1, Logger: quiet()})
	if _, err := r.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := st.finished[0][0].Error
	if strings.Contains(got, "s3cr3t") || strings.Contains(got, "abc123") || !strings.Contains(got, "400 Bad Request") {
		t.Fatalf("last_error = %q; want the text without the password and the token", got)
	}
}

// Status tells an outage while it lasts, and a failing database, for a
// readiness probe.
func TestRelayStatus(t *testing.T) {
	st := healthStore(50)
	pub := newBrokerSim()
	pub.down = true
	r, _ := NewRelay(st, pub, RelayConfig{BatchSize: 10, Interval: time.Millisecond,
		PauseBase: time.Millisecond, ProbeInterval: 10 * time.Millisecond, Logger: quiet()})
	if !r.Status().Ready() {
		t.Fatal("a new relay is not ready")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for !r.Status().Outage && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	s := r.Status()
	if !s.Outage || s.Ready() || s.OutageError == nil || s.OutageSince.IsZero() {
		t.Fatalf("status during an outage = %+v; want an outage with its error and start", s)
	}
	pub.set(func(b *brokerSim) { b.down = false })
	for pub.deliveredCount() < 50 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if s := r.Status(); !s.Ready() {
		t.Fatalf("status after the outage = %+v; want ready", s)
	}
	st.failMark = func(int) bool { return true }
	st.mu.Lock()
	st.rows = append(st.rows, Message{ID: 51, MsgID: "m-51", Topic: "t", CreatedAt: time.Now()})
	st.mu.Unlock()
	if _, err := r.RunOnce(context.Background()); err == nil {
		t.Fatal("a failing mark did not fail RunOnce")
	}
	if s := r.Status(); s.Ready() || s.DatabaseError == nil {
		t.Fatalf("status after a failed mark = %+v; want the database error", s)
	}
}

// With per-key order only the first message of each key can be tried: the
// first messages of outageKeys keys refused alike, with the messages held
// back behind them, are an outage; the first message of a single key is
// not, however many messages wait behind it, so that a poison message at the
// head of a key is charged and goes DEAD in time.
func TestHealthOutageOfKeyHeads(t *testing.T) {
	refused := errors.New("500 Internal Server Error: database unavailable")
	heads := func(h *health, keys []string, heldBack int) judgement {
		msgs := make([]Message, len(keys))
		p := plan{last: -1}
		var res []batchResult
		for i, k := range keys {
			msgs[i] = Message{ID: int64(i + 1), MsgID: fmt.Sprintf("m-%d", i), Key: k}
			p.first = append(p.first, i)
			res = append(res, batchResult{idx: i, err: refused})
		}
		return h.judge(msgs, p, res, nil, 500, heldBack)
	}
	if j := heads(newHealth(500), []string{"order-1", "order-2", "order-3"}, 30); j.verdict != outage || !j.releaseRefused {
		t.Errorf("3 keys' first messages refused alike, 30 held behind them: verdict %v, want an outage", j.verdict)
	}
	if j := heads(newHealth(500), []string{"order-1", "order-2", "order-3"}, 0); j.verdict == outage {
		t.Error("3 messages refused alike with nothing held behind them: an outage, want each message's own refusal")
	}
	h := newHealth(500)
	for range 5 {
		if j := heads(h, []string{"order-1"}, 1000); j.verdict == outage {
			t.Fatal("the first message of one key refused, 1000 held behind it: an outage, want its own refusal")
		}
	}
}

package webhook_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
	"github.com/outbox-go/outbox/webhook"
)

// memStore is an in-memory outboxdriver.Store, just enough for a Relay to run the
// publisher end to end against a real HTTP server: claims of due NEW rows,
// and marks that spend retries, set next_retry_at and make rows DEAD. The
// stores' own behaviour is tested by package drivertest.
type memStore struct {
	mu   sync.Mutex
	rows []memRow // by id, from 1
	held map[int64]bool
}

type memRow struct {
	outbox.Message
	due time.Time
}

func newMemStore(n int) *memStore {
	s := &memStore{held: map[int64]bool{}}
	for i := 1; i <= n; i++ {
		s.rows = append(s.rows, memRow{Message: outbox.Message{
			ID: int64(i), MsgID: fmt.Sprintf("m-%d", i), Topic: "order.paid", Payload: []byte(`{}`),
		}})
	}
	return s
}

// counts returns how many rows are SENT and DEAD, and the retries spent.
func (s *memStore) counts() (sent, dead, retries int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rows {
		switch r.Status {
		case outbox.StatusSent:
			sent++
		case outbox.StatusDead:
			dead++
		}
		retries += r.Retries
	}
	return sent, dead, retries
}

func (s *memStore) Dialect() string                            { return "memory" }
func (s *memStore) Tables() outbox.Tables                      { return outbox.Tables{}.WithDefaults() }
func (s *memStore) Migrate(context.Context) error              { return nil }
func (s *memStore) SchemaVersion(context.Context) (int, error) { return 1, nil }
func (s *memStore) Stats(context.Context) (outbox.Stats, error) {
	return outbox.Stats{}, nil
}
func (s *memStore) ListMessages(context.Context, outbox.ListFilter) ([]outbox.Message, error) {
	return nil, nil
}
func (s *memStore) GetMessage(context.Context, string) (outbox.Message, error) {
	return outbox.Message{}, outbox.ErrNotFound
}
func (s *memStore) RetryDead(context.Context, outbox.DeadFilter, string) (int64, error) {
	return 0, nil
}
func (s *memStore) DropDead(context.Context, outbox.DeadFilter) (int64, error) { return 0, nil }
func (s *memStore) DeleteSent(context.Context, time.Duration, int) (int64, error) {
	return 0, nil
}
func (s *memStore) DeleteConsumed(context.Context, time.Duration, int) (int64, error) {
	return 0, nil
}

func (s *memStore) Claim(_ context.Context, p outboxdriver.ClaimParams) (outboxdriver.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var out []outbox.Message
	for _, r := range s.rows {
		if r.Status == outbox.StatusNew && r.ID > p.AfterID && !r.due.After(now) && !s.held[r.ID] && len(out) < p.Limit {
			out = append(out, r.Message)
			s.held[r.ID] = true
		}
	}
	return &memClaim{s: s, msgs: out}, nil
}

type memClaim struct {
	s    *memStore
	msgs []outbox.Message
}

func (c *memClaim) Messages() []outbox.Message { return c.msgs }

func (c *memClaim) Abort(context.Context) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for _, m := range c.msgs {
		delete(c.s.held, m.ID)
	}
	return nil
}

func (c *memClaim) Finish(_ context.Context, outcomes []outbox.Outcome) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for i, m := range c.msgs {
		delete(c.s.held, m.ID)
		r := &c.s.rows[m.ID-1]
		switch o := outcomes[i]; o.Kind {
		case outbox.OutcomeSent:
			r.Status = outbox.StatusSent
		case outbox.OutcomeRetry:
			r.Retries++
			r.due = time.Now().Add(o.Delay)
		case outbox.OutcomeDead:
			r.Retries++
			r.Status = outbox.StatusDead
		}
	}
	return nil
}

// runRelay runs a relay from st to pub until until() holds or within has
// passed, then stops it.
func runRelay(t *testing.T, st outboxdriver.Store, pub outbox.Publisher, cfg outbox.RelayConfig, within time.Duration, until func() bool) {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := outbox.NewRelay(st, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(within)
	for !until() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// pausesThenSends relays rows messages through pub, in batches of batch
// with maxRetries, while the endpoint fails them, until failedEnough; no row
// may be DEAD and no retry spent. Then fix mends the endpoint, and every row
// must be SENT, still without a retry.
func pausesThenSends(t *testing.T, pub outbox.Publisher, rows, batch, maxRetries int, failedEnough func() bool, fix func(), what string) {
	t.Helper()
	st := newMemStore(rows)
	cfg := outbox.RelayConfig{BatchSize: batch, MaxRetries: maxRetries, Interval: time.Millisecond,
		RetryBase: time.Millisecond, RetryMax: time.Millisecond,
		PauseBase: 5 * time.Millisecond, PauseMax: 20 * time.Millisecond}
	runRelay(t, st, pub, cfg, 5*time.Second, failedEnough)
	if _, dead, retries := st.counts(); dead != 0 || retries != 0 {
		t.Fatalf("%s: %d rows DEAD, %d retries spent; want none", what, dead, retries)
	}
	fix()
	runRelay(t, st, pub, cfg, 5*time.Second, func() bool { sent, _, _ := st.counts(); return sent == rows })
	if sent, dead, retries := st.counts(); sent != rows || retries != 0 {
		t.Fatalf("%s, then mended: %d SENT, %d DEAD, %d retries; want all %d SENT without a retry", what, sent, dead, retries, rows)
	}
}

// TestRelayPausesOnEndpointStatus: an endpoint that answers every message
// alike with a status about itself (a wrong path, an expired token, a
// redirect) pauses the relay; no message spends a retry, and all of them go
// out once the endpoint is fixed. These statuses used to be refusals, and
// with MaxRetries 3 every row was DEAD within a second.
func TestRelayPausesOnEndpointStatus(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusNotFound, http.StatusUnauthorized, http.StatusPermanentRedirect, http.StatusNotImplemented} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			var fixed atomic.Bool
			var refused atomic.Int32
			b := setup(t, webhook.Config{}, func(w http.ResponseWriter, r *http.Request) {
				if !fixed.Load() {
					refused.Add(1)
					if code == http.StatusPermanentRedirect {
						w.Header().Set("Location", "https://elsewhere.example/hook")
					}
					w.WriteHeader(code)
				}
			})
			pausesThenSends(t, b.pub, 20, 5, 3, func() bool { return refused.Load() >= 10 }, func() { fixed.Store(true) },
				fmt.Sprintf("status %d (it concerns the endpoint)", code))
		})
	}
}

// TestRelayWaitsForRetryAfter: an endpoint that answers 429 or 503 with a
// Retry-After, in seconds or as a date, does not see the relay again before
// that time, even though the relay's own pause is far shorter; a Retry-After
// longer than PauseMax is cut to it. No retry is spent, and the messages go
// out afterwards.
func TestRelayWaitsForRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		code       int
		retryAfter func(now time.Time) string
		pauseMax   time.Duration
		// The wait the endpoint asks for, and the most it may take the
		// relay to come back.
		wait, atMost time.Duration
	}{
		{"429 seconds", http.StatusTooManyRequests, func(time.Time) string { return "1" },
			10 * time.Second, time.Second, 3 * time.Second},
		{"503 date", http.StatusServiceUnavailable, func(now time.Time) string { return now.Add(time.Second).UTC().Format(http.TimeFormat) },
			10 * time.Second, time.Second, 3 * time.Second},
		{"503 over PauseMax", http.StatusServiceUnavailable, func(time.Time) string { return "3600" },
			300 * time.Millisecond, 300 * time.Millisecond, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var (
				mu       sync.Mutex
				answered time.Time   // when the endpoint asked the relay to wait
				arrivals []time.Time // of the requests after that
			)
			b := setup(t, webhook.Config{}, func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				if answered.IsZero() {
					// Date and Retry-After from the same second, so that
					// the date form asks for exactly one second.
					now := time.Now()
					w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
					w.Header().Set("Retry-After", tc.retryAfter(now))
					answered = time.Now() // before the relay can have the answer
					w.WriteHeader(tc.code)
					return
				}
				arrivals = append(arrivals, time.Now())
			})
			st := newMemStore(3)
			cfg := outbox.RelayConfig{BatchSize: 1, MaxRetries: 1, Interval: time.Millisecond,
				PauseBase: 5 * time.Millisecond, PauseMax: tc.pauseMax}
			runRelay(t, st, b.pub, cfg, 10*time.Second, func() bool { sent, _, _ := st.counts(); return sent == 3 })
			mu.Lock()
			defer mu.Unlock()
			if answered.IsZero() || len(arrivals) == 0 {
				t.Fatalf("the endpoint saw no request after its %d", tc.code)
			}
			if gap := arrivals[0].Sub(answered); gap < tc.wait || gap > tc.atMost {
				t.Errorf("the relay came back %s after a %d asking for %s (PauseMax %s); want within [%s, %s]",
					gap, tc.code, tc.wait, tc.pauseMax, tc.wait, tc.atMost)
			}
			if sent, dead, retries := st.counts(); sent != 3 || dead != 0 || retries != 0 {
				t.Errorf("%d SENT, %d DEAD, %d retries; want all 3 SENT without a retry", sent, dead, retries)
			}
		})
	}
}

// TestRelayPausesOnHungEndpoint: an endpoint that takes requests and never
// answers pauses the relay; no message spends a retry (with MaxRetries 1,
// each timeout used to make a message DEAD), and all go out once the
// endpoint answers again.
func TestRelayPausesOnHungEndpoint(t *testing.T) {
	t.Parallel()
	var answering atomic.Bool
	var hung atomic.Int32
	b := setup(t, webhook.Config{Timeout: 50 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		if !answering.Load() {
			hung.Add(1)
			hang(w, r)
		}
	})
	pausesThenSends(t, b.pub, 12, 4, 1, func() bool { return hung.Load() >= 12 }, func() { answering.Store(true) }, "a hung endpoint")
}

// TestRelayChargesMessageThatHangs: a message whose request the endpoint
// never answers, while it answers every other: the relay publishes it alone
// after the others, charges its retries and makes it DEAD, and every other
// message is sent without a retry.
func TestRelayChargesMessageThatHangs(t *testing.T) {
	t.Parallel()
	// The timeout must be long enough that every other request is answered
	// within it on a loaded machine: one that is not is charged a retry too.
	b := setup(t, webhook.Config{Timeout: 300 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Ce-Id") == "m-7" {
			hang(w, r)
		}
	})
	st := newMemStore(20)
	cfg := outbox.RelayConfig{BatchSize: 10, MaxRetries: 2, RetryBudget: -1, Interval: time.Millisecond,
		RetryBase: time.Millisecond, RetryMax: time.Millisecond, PauseBase: 5 * time.Millisecond, ProbeInterval: 20 * time.Millisecond}
	runRelay(t, st, b.pub, cfg, 10*time.Second, func() bool { sent, dead, _ := st.counts(); return sent == 19 && dead == 1 })
	sent, dead, retries := st.counts()
	if sent != 19 || dead != 1 || retries != 2 {
		t.Fatalf("%d SENT, %d DEAD, %d retries; want 19, 1 (the message that hangs, after its 2 retries), 2", sent, dead, retries)
	}
}

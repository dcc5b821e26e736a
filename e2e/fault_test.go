package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox"
)

// The fault tests (poison_test.go, outage_test.go) run a real relay, in
// process, on a PostgreSQL schema of their own, with retry settings small
// enough that a message refused for good ends DEAD within seconds: a test of
// what ends DEAD, and of what must not, takes seconds rather than a day.
const (
	faultRetryBase     = 50 * time.Millisecond
	faultRetryMax      = 200 * time.Millisecond
	faultMaxRetries    = 3
	faultProbeInterval = 300 * time.Millisecond
)

// faultRelay starts a relay of h's outbox through pub with the fault tests'
// retry settings and budget; it runs until the test ends.
func faultRelay(t *testing.T, h *harness, pub outbox.Publisher, budget time.Duration) {
	t.Helper()
	r, err := outbox.NewRelay(h.producer, pub, outbox.RelayConfig{
		BatchSize:      50,
		Interval:       20 * time.Millisecond,
		RetryBase:      faultRetryBase,
		RetryMax:       faultRetryMax,
		MaxRetries:     faultMaxRetries,
		RetryBudget:    budget,
		ProbeInterval:  faultProbeInterval,
		PublishTimeout: 2 * time.Second,
		PauseBase:      50 * time.Millisecond,
		PauseMax:       time.Second,
		Logger:         slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
		closeIfCloser(pub)
	})
}

// arrivals records the msg_ids a receiver got, and when each came first.
type arrivals struct {
	mu    sync.Mutex
	first map[string]time.Time
}

func newArrivals() *arrivals { return &arrivals{first: map[string]time.Time{}} }

func (a *arrivals) add(msgID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.first[msgID]; !ok {
		a.first[msgID] = time.Now()
	}
}

// handler records each delivery and acks it.
func (a *arrivals) handler() outbox.Handler {
	return func(_ context.Context, m outbox.Message) error {
		a.add(m.MsgID)
		return nil
	}
}

// missing returns the ids of ids that have not arrived.
func (a *arrivals) missing(ids []string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, id := range ids {
		if _, ok := a.first[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}

// waitAll waits up to bound for every id of ids to arrive, and fails the
// test with the missing ones if they do not.
func (a *arrivals) waitAll(t *testing.T, ids []string, bound time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		miss := a.missing(ids)
		if len(miss) == 0 {
			return
		}
		if time.Now().After(deadline) {
			if len(miss) > 10 {
				miss = append(miss[:10], fmt.Sprintf("and %d more", len(miss)-10))
			}
			t.Fatalf("%s: %d of %d messages did not arrive within %s: %v", what, len(a.missing(ids)), len(ids), bound, miss)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// brokerReceiver is a receiver through a broker's subscriber.
func brokerReceiver(b Broker) func(t *testing.T, a *arrivals) {
	return func(t *testing.T, a *arrivals) { runSubscriber(t, b.Name, b.NewSubscriber(t, "faults"), a) }
}

// writeMessages commits n messages of topic, msg_ids prefix-0000 on from
// first, in transactions of ten, and returns their ids.
func writeMessages(ctx context.Context, t *testing.T, h *harness, topic, prefix string, first, n int) []string {
	t.Helper()
	var ids []string
	for i := first; i < first+n; i += 10 {
		var msgs []outbox.Message
		for j := i; j < min(i+10, first+n); j++ {
			id := fmt.Sprintf("%s-%04d", prefix, j)
			ids = append(ids, id)
			msgs = append(msgs, outbox.Message{MsgID: id, Topic: topic, Key: fmt.Sprintf("k%d", j%5),
				Payload: []byte(fmt.Sprintf(`{"n":%d}`, j))})
		}
		err := pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error { return h.writer.Write(ctx, tx, msgs...) })
		if err != nil {
			t.Fatalf("writing %s: %v", ids[len(ids)-1], err)
		}
	}
	return ids
}

// insertRow puts a row into h's outbox by plain SQL, beside the Writer,
// which would refuse it.
func insertRow(ctx context.Context, t *testing.T, h *harness, m outbox.Message) {
	t.Helper()
	var headers any
	if m.Headers != nil {
		b, err := json.Marshal(m.Headers)
		if err != nil {
			t.Fatal(err)
		}
		headers = string(b)
	}
	var key any
	if m.Key != "" {
		key = m.Key
	}
	if _, err := h.pool.Exec(ctx, `INSERT INTO outbox (msg_id, topic, msg_key, payload, headers) VALUES ($1, $2, $3, $4::jsonb, $5::jsonb)`,
		m.MsgID, m.Topic, key, string(m.Payload), headers); err != nil {
		t.Fatalf("inserting the row %q by SQL: %v", m.MsgID, err)
	}
}

// rowState is a row's status (0 NEW, 1 SENT, 2 DEAD), retries and
// last_error.
type rowState struct {
	status    int
	retries   int
	lastError string
}

func readRow(ctx context.Context, t *testing.T, h *harness, msgID string) rowState {
	t.Helper()
	var s rowState
	var lastErr *string
	if err := h.pool.QueryRow(ctx, `SELECT status, retries, last_error FROM outbox WHERE msg_id = $1`, msgID).Scan(&s.status, &s.retries, &lastErr); err != nil {
		t.Fatalf("reading the row %q: %v", msgID, err)
	}
	if lastErr != nil {
		s.lastError = *lastErr
	}
	return s
}

// countStatus counts h's outbox rows of status.
func countStatus(ctx context.Context, t *testing.T, h *harness, status int) int {
	t.Helper()
	var n int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE status = $1`, status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// faultHarness is the producer's side of a fault test: a PostgreSQL schema
// with the outbox tables (the harness's consumer side goes unused).
func faultHarness(ctx context.Context, t *testing.T, name string) *harness {
	t.Helper()
	return newHarness(ctx, t, Broker{Name: name})
}

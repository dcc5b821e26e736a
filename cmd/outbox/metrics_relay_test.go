package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxpgx"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
	"github.com/outbox-go/outbox/outboxdriver"
	"github.com/outbox-go/outbox/plugin/outboxprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// metricsStore is what the relay test needs of a driver.
type metricsStore interface {
	outboxdriver.Store
	outboxdriver.BacklogReader
}

// metricsWriter writes messages in their own transaction.
type metricsWriter func(t *testing.T, msgs ...outbox.Message)

// metricsPostgres is a pgx driver on a schema of the test's own.
func metricsPostgres(t *testing.T) (metricsStore, metricsWriter) {
	t.Helper()
	b := newPostgres(t)
	pool, err := pgxpool.New(context.Background(), b.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	drv, err := outboxpgx.New(pool, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	return drv, migrateAndWriter(t, drv)
}

// metricsSQLite is an SQLite driver on a file of the test's own.
func metricsSQLite(t *testing.T) (metricsStore, metricsWriter) {
	t.Helper()
	db, err := outboxsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	drv, err := outboxsqlite.New(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	return drv, migrateAndWriter(t, drv)
}

func migrateAndWriter[TTx any](t *testing.T, drv outboxdriver.Driver[TTx]) metricsWriter {
	t.Helper()
	if err := drv.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return func(t *testing.T, msgs ...outbox.Message) {
		t.Helper()
		err := drv.RunInTx(context.Background(), func(ctx context.Context, tx TTx) error { return w.Write(ctx, tx, msgs...) })
		if err != nil {
			t.Fatal(err)
		}
	}
}

func metricsMsg(id, topic string) outbox.Message {
	return outbox.Message{MsgID: id, Topic: topic, Payload: []byte(`{}`)}
}

// TestRelayHookMetrics runs a real relay (outbox.NewRelay) with the
// outboxprom hook on PostgreSQL and SQLite: a publisher
// that refuses some messages, which go DEAD at once (MaxRetries 1) or wait
// out a retry, and checks the relay's counters and the backlog's gauges.
func TestRelayHookMetrics(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		setup func(*testing.T) (metricsStore, metricsWriter)
	}{{"postgres", metricsPostgres}, {"sqlite", metricsSQLite}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st, write := c.setup(t)
			m, err := outboxprom.New(outboxprom.Backlog(st), outboxprom.BacklogInterval(0))
			if err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(m)

			for i := range 10 {
				write(t, metricsMsg(fmt.Sprintf("paid-%d", i), "order.paid"))
			}
			write(t, metricsMsg("poison-1", "order.created"), metricsMsg("poison-2", "order.created"), metricsMsg("ok-1", "order.created"))
			pub := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
				if strings.HasPrefix(m.MsgID, "poison") {
					return errors.New("refused by test")
				}
				return nil
			})
			runRelayUntil(t, st, pub, outbox.RelayConfig{MaxRetries: 1, Hooks: []any{m}}, func() bool {
				return messagesTotal(t, reg, "order.created", "dead") == 2
			})

			// One more message waits out its retry's backoff: pending.
			write(t, metricsMsg("retry-1", "order.paid"))
			pubRetry := outbox.PublishFunc(func(context.Context, outbox.Message) error { return errors.New("not now") })
			runRelayUntil(t, st, pubRetry, outbox.RelayConfig{RetryBase: time.Hour, RetryMax: time.Hour, Hooks: []any{m}}, func() bool {
				return messagesTotal(t, reg, "order.paid", "retried") == 1
			})

			for _, w := range []struct {
				topic, outcome string
				n              float64
			}{
				{"order.paid", "sent", 10}, {"order.paid", "retried", 1}, {"order.paid", "dead", 0},
				{"order.created", "sent", 1}, {"order.created", "dead", 2}, {"order.created", "retried", 0},
			} {
				if got := messagesTotal(t, reg, w.topic, w.outcome); got != w.n {
					t.Errorf("%s %s: %g, want %g", w.topic, w.outcome, got, w.n)
				}
			}
			want := `
# HELP outbox_backlog_up 1 when the last read of the outbox table's backlog succeeded, 0 when it failed or timed out.
# TYPE outbox_backlog_up gauge
outbox_backlog_up 1
# HELP outbox_dead_messages DEAD messages in the outbox table, waiting for an operator (reported where the store counts them through an index: every SQL dialect at its latest schema).
# TYPE outbox_dead_messages gauge
outbox_dead_messages 2
# HELP outbox_pending_messages NEW messages in the outbox table, due or waiting for a retry.
# TYPE outbox_pending_messages gauge
outbox_pending_messages 1
`
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "outbox_backlog_up", "outbox_pending_messages", "outbox_dead_messages"); err != nil {
				t.Fatal(err)
			}
			age := gatherValue(t, reg, "outbox_pending_oldest_age_seconds")
			if age <= 0 || age > 60 {
				t.Errorf("oldest pending age %gs", age)
			}
			if last := gatherValue(t, reg, "outbox_relay_last_batch_timestamp_seconds"); time.Since(time.Unix(int64(last), 0)) > time.Minute {
				t.Errorf("last batch at %g", last)
			}
			if n := gatherValue(t, reg, "outbox_relay_batches_total"); n < 2 {
				t.Errorf("%g batches", n)
			}
		})
	}
}

// runRelayUntil runs a relay until cond holds (within 30s), then stops it.
func runRelayUntil(t *testing.T, st outboxdriver.Store, pub outbox.Publisher, cfg outbox.RelayConfig, cond func() bool) {
	t.Helper()
	cfg.Interval = 10 * time.Millisecond
	cfg.RetryBudget = -1 // DEAD on MaxRetries alone
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := outbox.NewRelay(st, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !cond() {
		t.Fatal("the relay did not get there within 30s")
	}
}

// messagesTotal gathers reg for outbox_relay_messages_total{topic, outcome}.
func messagesTotal(t *testing.T, reg *prometheus.Registry, topic, outcome string) float64 {
	t.Helper()
	return gatherLabeled(t, reg, "outbox_relay_messages_total", map[string]string{"topic": topic, "outcome": outcome})
}

func gatherValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return gatherLabeled(t, reg, name, nil)
}

// gatherLabeled gathers reg and returns the value of the series name{labels}, 0 if
// there is none.
func gatherLabeled(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

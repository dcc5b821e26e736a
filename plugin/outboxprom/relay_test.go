package outboxprom_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"github.com/outbox-go/outbox/plugin/outboxprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The relay tests run against this machine's PostgreSQL (a schema of their
// own) and an SQLite file; a database that cannot be reached fails them.
const pgDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

type store interface {
	outbox.Store
	outbox.BacklogReader
}

// writer writes one message in its own transaction.
type writer func(t *testing.T, msgs ...outbox.Message)

func uniqueName() string {
	var b [6]byte
	rand.Read(b[:])
	return "outboxprom_" + hex.EncodeToString(b[:])
}

func setupPostgres(t *testing.T) (store, writer) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, pgDSN)
	if err == nil {
		err = admin.Ping(ctx)
	}
	if err != nil {
		t.Fatalf("PostgreSQL at 127.0.0.1:5432 (user postgres, database test) is needed by this test: %v", err)
	}
	t.Cleanup(admin.Close)
	schema := uniqueName()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	pool, err := pgxpool.New(ctx, pgDSN+"&search_path="+schema)
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

func setupSQLite(t *testing.T) (store, writer) {
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

func migrateAndWriter[TTx any](t *testing.T, drv outbox.Driver[TTx]) writer {
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

func msg(id, topic string) outbox.Message {
	return outbox.Message{MsgID: id, Topic: topic, Payload: []byte(`{}`)}
}

// TestRelay runs a real relay with the hook on each database: a publisher
// that refuses some messages, which go DEAD at once (MaxRetries 1) or wait
// out a retry, and checks the relay's counters and the backlog's gauges.
func TestRelay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		setup func(*testing.T) (store, writer)
	}{{"postgres", setupPostgres}, {"sqlite", setupSQLite}} {
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
				write(t, msg(fmt.Sprintf("paid-%d", i), "order.paid"))
			}
			write(t, msg("poison-1", "order.created"), msg("poison-2", "order.created"), msg("ok-1", "order.created"))
			pub := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
				if strings.HasPrefix(m.MsgID, "poison") {
					return errors.New("refused by test")
				}
				return nil
			})
			runUntil(t, st, pub, outbox.RelayConfig{MaxRetries: 1, Hooks: []any{m}}, func() bool {
				return count(t, reg, "order.created", "dead") == 2
			})

			// One more message waits out its retry's backoff: pending.
			write(t, msg("retry-1", "order.paid"))
			pubRetry := outbox.PublishFunc(func(context.Context, outbox.Message) error { return errors.New("not now") })
			runUntil(t, st, pubRetry, outbox.RelayConfig{RetryBase: time.Hour, RetryMax: time.Hour, Hooks: []any{m}}, func() bool {
				return count(t, reg, "order.paid", "retried") == 1
			})

			for _, w := range []struct {
				topic, outcome string
				n              float64
			}{
				{"order.paid", "sent", 10}, {"order.paid", "retried", 1}, {"order.paid", "dead", 0},
				{"order.created", "sent", 1}, {"order.created", "dead", 2}, {"order.created", "retried", 0},
			} {
				if got := count(t, reg, w.topic, w.outcome); got != w.n {
					t.Errorf("%s %s: %g, want %g", w.topic, w.outcome, got, w.n)
				}
			}
			want := `
# HELP outbox_backlog_up 1 when the last read of the outbox table's backlog succeeded, 0 when it failed or timed out.
# TYPE outbox_backlog_up gauge
outbox_backlog_up 1
# HELP outbox_pending_messages NEW messages in the outbox table, due or waiting for a retry.
# TYPE outbox_pending_messages gauge
outbox_pending_messages 1
`
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "outbox_backlog_up", "outbox_pending_messages", "outbox_dead_messages"); err != nil {
				t.Fatal(err)
			}
			age := gauge(t, reg, "outbox_pending_oldest_age_seconds")
			if age <= 0 || age > 60 {
				t.Errorf("oldest pending age %gs", age)
			}
			if last := gauge(t, reg, "outbox_relay_last_batch_timestamp_seconds"); time.Since(time.Unix(int64(last), 0)) > time.Minute {
				t.Errorf("last batch at %g", last)
			}
			if n := gauge(t, reg, "outbox_relay_batches_total"); n < 2 {
				t.Errorf("%g batches", n)
			}
		})
	}
}

// runUntil runs a relay until cond holds (within 30s), then stops it.
func runUntil(t *testing.T, st outbox.Store, pub outbox.Publisher, cfg outbox.RelayConfig, cond func() bool) {
	t.Helper()
	cfg.Interval = 10 * time.Millisecond
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

// count gathers reg for outbox_relay_messages_total{topic, outcome}.
func count(t *testing.T, reg *prometheus.Registry, topic, outcome string) float64 {
	t.Helper()
	return value(t, reg, "outbox_relay_messages_total", map[string]string{"topic": topic, "outcome": outcome})
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return value(t, reg, name, nil)
}

// value gathers reg and returns the value of the series name{labels}, 0 if
// there is none.
func value(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
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

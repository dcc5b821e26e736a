package outboxprom

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// report builds a BatchReport of outcomes, one per "topic:kind" entry.
func report(entries ...string) outbox.BatchReport {
	var rep outbox.BatchReport
	kinds := map[string]outbox.OutcomeKind{"sent": outbox.OutcomeSent, "retried": outbox.OutcomeRetry,
		"dead": outbox.OutcomeDead, "released": outbox.OutcomeRelease}
	for i, e := range entries {
		topic, kind, _ := strings.Cut(e, ":")
		k := kinds[kind]
		rep.Results = append(rep.Results, outbox.MessageResult{
			Message: outbox.Message{ID: int64(i + 1), MsgID: fmt.Sprint(i), Topic: topic},
			Outcome: outbox.Outcome{Kind: k},
		})
		switch k {
		case outbox.OutcomeSent:
			rep.Sent++
		case outbox.OutcomeRetry:
			rep.Retried++
		case outbox.OutcomeDead:
			rep.Dead++
		case outbox.OutcomeRelease:
			rep.Released++
		}
	}
	rep.ClaimDuration, rep.PublishDuration, rep.MarkDuration = time.Millisecond, 3*time.Millisecond, 2*time.Millisecond
	rep.Duration = 7 * time.Millisecond
	return rep
}

func newMetrics(t *testing.T, opts ...Opt) (*Metrics, *prometheus.Registry) {
	t.Helper()
	m, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	return m, reg
}

func TestOnBatchCounts(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	ctx := context.Background()
	m.OnBatch(ctx, report("a:sent", "b:sent", "a:sent", "a:retried", "b:dead", "a:released", "a:sent"))
	m.OnBatch(ctx, report("b:sent", "b:sent"))
	outage := report("a:released", "b:released")
	outage.Outage = errors.New("connection refused")
	m.OnBatch(ctx, outage)
	want := `
# HELP outbox_relay_batches_total Batches the relay finished (claimed, published and marked); empty claims are not counted.
# TYPE outbox_relay_batches_total counter
outbox_relay_batches_total 3
# HELP outbox_relay_messages_total Messages the relay handled, by topic and outcome: sent, retried (refused, to be retried), dead (refused for the last time) or released (left NEW: the broker was unreachable, or an earlier message of the key failed).
# TYPE outbox_relay_messages_total counter
outbox_relay_messages_total{outcome="dead",topic="a"} 0
outbox_relay_messages_total{outcome="dead",topic="b"} 1
outbox_relay_messages_total{outcome="released",topic="a"} 2
outbox_relay_messages_total{outcome="released",topic="b"} 1
outbox_relay_messages_total{outcome="retried",topic="a"} 1
outbox_relay_messages_total{outcome="retried",topic="b"} 0
outbox_relay_messages_total{outcome="sent",topic="a"} 3
outbox_relay_messages_total{outcome="sent",topic="b"} 3
# HELP outbox_relay_outage_batches_total Batches the relay took for an outage of the broker (unreachable, or many messages refused alike): they spent no retries, and the relay paused and probed one message at a time. Growing while the broker is down.
# TYPE outbox_relay_outage_batches_total counter
outbox_relay_outage_batches_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "outbox_relay_batches_total", "outbox_relay_messages_total", "outbox_relay_outage_batches_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m, "outbox_relay_stage_duration_seconds"); n != 3 {
		t.Fatalf("%d stage histograms, want claim, publish and mark", n)
	}
	// The histograms saw three batches of 7 ms: all in the 0.01 bucket.
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range got {
		switch mf.GetName() {
		case "outbox_relay_batch_duration_seconds":
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 3 || h.GetSampleSum() < 0.0209 || h.GetSampleSum() > 0.0211 {
				t.Errorf("batch duration: %d samples, sum %g", h.GetSampleCount(), h.GetSampleSum())
			}
		case "outbox_relay_last_batch_timestamp_seconds":
			v := mf.GetMetric()[0].GetGauge().GetValue()
			if age := time.Since(time.Unix(0, int64(v*1e9))); age < 0 || age > time.Minute {
				t.Errorf("last batch %g is %s ago", v, age)
			}
		}
	}
}

func TestOnCleanup(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	ctx := context.Background()
	if n := testutil.CollectAndCount(m, "outbox_cleanup_rounds_total", "outbox_cleanup_last_success_timestamp_seconds"); n != 0 {
		t.Fatalf("%d cleanup series before any cleaner reported, want none", n)
	}
	m.OnCleanup(ctx, outbox.CleanerReport{Sent: 1000, Consumed: 20}, nil)
	m.OnCleanup(ctx, outbox.CleanerReport{Sent: 7}, errors.New("connection refused"))
	m.OnCleanup(ctx, outbox.CleanerReport{}, nil)
	want := `
# HELP outbox_cleanup_deleted_rows_total Rows an outbox.Cleaner deleted: rows is sent (SENT messages of the outbox table) or consumed (records of the inbox table).
# TYPE outbox_cleanup_deleted_rows_total counter
outbox_cleanup_deleted_rows_total{rows="consumed"} 20
outbox_cleanup_deleted_rows_total{rows="sent"} 1007
# HELP outbox_cleanup_rounds_total Rounds an outbox.Cleaner ran, by result: ok or failed.
# TYPE outbox_cleanup_rounds_total counter
outbox_cleanup_rounds_total{result="failed"} 1
outbox_cleanup_rounds_total{result="ok"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "outbox_cleanup_deleted_rows_total", "outbox_cleanup_rounds_total"); err != nil {
		t.Fatal(err)
	}
	v := testutil.ToFloat64(m.cleanupLastOK.WithLabelValues())
	if age := time.Since(time.Unix(0, int64(v*1e9))); age < 0 || age > time.Minute {
		t.Fatalf("last success %g is %s ago", v, age)
	}
}

func TestManyTopicsInOneBatch(t *testing.T) {
	t.Parallel()
	m, _ := newMetrics(t)
	var entries []string
	for i := range 3 * smallTallies {
		entries = append(entries, fmt.Sprintf("t%02d:sent", i%(2*smallTallies)))
	}
	m.OnBatch(context.Background(), report(entries...))
	for i := range 2 * smallTallies {
		want := 1.0
		if i < smallTallies {
			want = 2
		}
		if got := testutil.ToFloat64(m.messages.WithLabelValues(fmt.Sprintf("t%02d", i), "sent")); got != want {
			t.Errorf("topic t%02d: %g sent, want %g", i, got, want)
		}
	}
}

func TestMaxTopics(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t, MaxTopics(2))
	ctx := context.Background()
	m.OnBatch(ctx, report("a:sent", "b:sent"))
	m.OnBatch(ctx, report("c:sent", "d:dead", "a:sent", "c:sent"))
	want := `
# HELP outbox_relay_messages_total Messages the relay handled, by topic and outcome: sent, retried (refused, to be retried), dead (refused for the last time) or released (left NEW: the broker was unreachable, or an earlier message of the key failed).
# TYPE outbox_relay_messages_total counter
outbox_relay_messages_total{outcome="dead",topic="_other"} 1
outbox_relay_messages_total{outcome="dead",topic="a"} 0
outbox_relay_messages_total{outcome="dead",topic="b"} 0
outbox_relay_messages_total{outcome="released",topic="_other"} 0
outbox_relay_messages_total{outcome="released",topic="a"} 0
outbox_relay_messages_total{outcome="released",topic="b"} 0
outbox_relay_messages_total{outcome="retried",topic="_other"} 0
outbox_relay_messages_total{outcome="retried",topic="a"} 0
outbox_relay_messages_total{outcome="retried",topic="b"} 0
outbox_relay_messages_total{outcome="sent",topic="_other"} 2
outbox_relay_messages_total{outcome="sent",topic="a"} 2
outbox_relay_messages_total{outcome="sent",topic="b"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "outbox_relay_messages_total"); err != nil {
		t.Fatal(err)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opt  Opt
		want string
	}{
		{Namespace("9x"), "namespace"},
		{Namespace("a-b"), "namespace"},
		{Buckets(nil), "buckets"},
		{Buckets([]float64{1, 1}), "increase"},
		{MaxTopics(0), "MaxTopics"},
		{BacklogInterval(-time.Second), "BacklogInterval"},
		{BacklogTimeout(0), "BacklogTimeout"},
	} {
		if _, err := New(c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("option %s: %v, want an error about %s", c.want, err, c.want)
		}
	}
	m, reg := newMetrics(t, Namespace("shop_outbox"), Buckets([]float64{0.1, 1}))
	m.OnBatch(context.Background(), report("a:sent"))
	if n, err := testutil.GatherAndCount(reg, "shop_outbox_relay_batches_total"); err != nil || n != 1 {
		t.Fatalf("namespace: %d, %v", n, err)
	}
}

// fakeBacklog is a BacklogReader whose answer the test sets.
type fakeBacklog struct {
	reads   atomic.Int64
	backlog outboxdriver.Backlog
	err     error
	// block, when set, makes Backlog wait for it to close, ignoring ctx.
	block chan struct{}
	// heed, with block, makes Backlog give up when ctx ends.
	heed bool
}

func (f *fakeBacklog) Backlog(ctx context.Context) (outboxdriver.Backlog, error) {
	f.reads.Add(1)
	if f.block != nil {
		if f.heed {
			select {
			case <-f.block:
			case <-ctx.Done():
				return outboxdriver.Backlog{}, ctx.Err()
			}
		} else {
			<-f.block
		}
	}
	return f.backlog, f.err
}

const backlogHelp = `
# HELP outbox_backlog_up 1 when the last read of the outbox table's backlog succeeded, 0 when it failed or timed out.
# TYPE outbox_backlog_up gauge
outbox_backlog_up %d
`

func TestBacklogGauges(t *testing.T) {
	t.Parallel()
	f := &fakeBacklog{backlog: outboxdriver.Backlog{Pending: 7, OldestPendingAge: 90 * time.Second, Dead: 3, DeadCounted: true}}
	_, reg := newMetrics(t, Backlog(f), BacklogInterval(time.Hour))
	want := fmt.Sprintf(backlogHelp, 1) + `
# HELP outbox_dead_messages DEAD messages in the outbox table, waiting for an operator (reported where the store counts them through an index: every SQL dialect at its latest schema).
# TYPE outbox_dead_messages gauge
outbox_dead_messages 3
# HELP outbox_pending_messages NEW messages in the outbox table, due or waiting for a retry.
# TYPE outbox_pending_messages gauge
outbox_pending_messages 7
# HELP outbox_pending_oldest_age_seconds Age of the oldest NEW message in the outbox table (0 when none): how far the relay is behind.
# TYPE outbox_pending_oldest_age_seconds gauge
outbox_pending_oldest_age_seconds 90
# HELP outbox_backlog_read_failures_total Reads of the outbox table's backlog that failed or timed out.
# TYPE outbox_backlog_read_failures_total counter
outbox_backlog_read_failures_total 0
`
	names := []string{"outbox_backlog_up", "outbox_dead_messages", "outbox_pending_messages", "outbox_pending_oldest_age_seconds", "outbox_backlog_read_failures_total"}
	for range 3 {
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.reads.Load(); n != 1 {
		t.Fatalf("three scrapes within BacklogInterval read the backlog %d times, want 1", n)
	}
}

func TestBacklogUncountedDead(t *testing.T) {
	t.Parallel()
	f := &fakeBacklog{backlog: outboxdriver.Backlog{Pending: 1}}
	_, reg := newMetrics(t, Backlog(f), BacklogInterval(0))
	for range 2 {
		if n, err := testutil.GatherAndCount(reg, "outbox_dead_messages"); err != nil || n != 0 {
			t.Fatalf("uncounted DEAD messages reported: %d series, %v", n, err)
		}
	}
	if n := f.reads.Load(); n != 2 {
		t.Fatalf("BacklogInterval 0: %d reads for 2 scrapes", n)
	}
}

func TestBacklogFailure(t *testing.T) {
	t.Parallel()
	f := &fakeBacklog{err: errors.New("connection refused")}
	m, reg := newMetrics(t, Backlog(f), BacklogInterval(0))
	m.OnBatch(context.Background(), report("a:sent"))
	want := fmt.Sprintf(backlogHelp, 0) + `
# HELP outbox_backlog_read_failures_total Reads of the outbox table's backlog that failed or timed out.
# TYPE outbox_backlog_read_failures_total counter
outbox_backlog_read_failures_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "outbox_backlog_up", "outbox_pending_messages", "outbox_backlog_read_failures_total"); err != nil {
		t.Fatal(err)
	}
	// The relay's series are there all the same.
	if n, err := testutil.GatherAndCount(reg, "outbox_relay_batches_total"); err != nil || n != 1 {
		t.Fatalf("relay series beside a failed backlog: %d, %v", n, err)
	}
}

// TestBacklogSlow: a database that does not answer holds a scrape up for
// BacklogTimeout at most, whether or not the store heeds its context, and a
// store that does not keeps one read in flight, not one per scrape.
func TestBacklogSlow(t *testing.T) {
	t.Parallel()
	for _, heed := range []bool{true, false} {
		t.Run(fmt.Sprintf("heed=%v", heed), func(t *testing.T) {
			t.Parallel()
			f := &fakeBacklog{block: make(chan struct{}), heed: heed}
			defer close(f.block) // before goleak looks
			_, reg := newMetrics(t, Backlog(f), BacklogInterval(0), BacklogTimeout(100*time.Millisecond))
			for range 3 {
				start := time.Now()
				if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(backlogHelp, 0)), "outbox_backlog_up"); err != nil {
					t.Fatal(err)
				}
				if took := time.Since(start); took > 2*time.Second {
					t.Fatalf("a scrape took %s with BacklogTimeout 100ms", took)
				}
			}
			if n := f.reads.Load(); !heed && n != 1 {
				t.Fatalf("%d reads for 3 scrapes of a store that ignores its context, want 1 in flight", n)
			}
		})
	}
}

// BenchmarkOnBatch: one batch of 500 messages over 3 topics, as the relay
// reports it; the relay itself spends some 2-3 µs per message.
func BenchmarkOnBatch(b *testing.B) {
	m, err := New()
	if err != nil {
		b.Fatal(err)
	}
	var entries []string
	for i := range 500 {
		kind := "sent"
		if i%50 == 7 {
			kind = "retried"
		}
		entries = append(entries, fmt.Sprintf("order.%d:%s", i%3, kind))
	}
	rep := report(entries...)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		m.OnBatch(ctx, rep)
	}
}

// A topic that quotes a URL with credentials is served with them masked.
func TestTopicLabelHoldsNoSecret(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	var rep outbox.BatchReport
	for i, topic := range []string{"https://u:lab3l-pw@h/x?token=lab3l-tok", "nats://lab3l-tok@h:4222", "order.paid"} {
		rep.Results = append(rep.Results, outbox.MessageResult{
			Message: outbox.Message{ID: int64(i + 1), MsgID: fmt.Sprint(i), Topic: topic},
			Outcome: outbox.Outcome{Kind: outbox.OutcomeSent},
		})
	}
	m.OnBatch(context.Background(), rep)
	var out strings.Builder
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				fmt.Fprintf(&out, "%s=%q\n", lp.GetName(), lp.GetValue())
			}
		}
	}
	for _, secret := range []string{"lab3l-pw", "lab3l-tok"} {
		if strings.Contains(out.String(), secret) {
			t.Errorf("a label holds %q:\n%s", secret, out.String())
		}
	}
	for _, want := range []string{`topic="https://u:xxxxx@h/x?token=xxxxx"`, `topic="nats://xxxxx@h:4222"`, `topic="order.paid"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("labels lack %s:\n%s", want, out.String())
		}
	}
}

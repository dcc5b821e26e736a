package bench

import (
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/brokers"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-go/outbox"
)

// rateOptions are the flags of `outbox bench --rate` and `--idle`.
type rateOptions struct {
	rate     int
	duration time.Duration
	idle     time.Duration
	producer string
	interval time.Duration
	noWatch  bool
}

// addRateFlags adds the flags of the fixed-rate and idle benches.
func addRateFlags(f *cli.FlagSet, o *benchOptions) {
	o.rateOpts = &rateOptions{}
	r := o.rateOpts
	f.IntVar(&r.rate, "rate", 0, "N",
		"commit N transactions a second (a business row and an outbox row each) from --producers connections (default 16) for --duration, "+
			"with and without a relay (default config, webhook to a local receiver), and print commit→publish latency and producer_ratio")
	f.DurationVar(&r.duration, "duration", 10*time.Second, "with --rate: how long the producers run in each half of a run")
	f.DurationVar(&r.idle, "idle", 0, "measure the relay's and its database backends' CPU, as % of one core, over this long with an empty table")
	f.DurationVar(&r.interval, "relay-interval", 0, "with --rate or --idle: the relay's --interval (0: its default)")
	f.BoolVar(&r.noWatch, "relay-no-watch", "with --rate or --idle: the relay only polls (its --no-watch)")
	f.StringVar(&r.producer, "producer", "sql", "KIND",
		"with --rate: sql (plain BEGIN/INSERT/INSERT/COMMIT) or writer (the outbox Writer; on PostgreSQL WriteOnCommit, which wakes the relay after the commit; on SQLite RunInTx, which wakes a relay in the process)")
}

// rateBench is one `outbox bench --rate` or `--idle` session.
type rateBench struct {
	o      *benchOptions
	db     *dbopen.Database // the producers'
	relay  *dbopen.Database // the relay's: its own pool, as another process would have
	recv   *rateReceiver
	pub    outbox.Publisher
	biz    string
	conns  int
	prefix string
}

// benchRate runs the --idle and --rate benches and prints their result.
func benchRate(ctx context.Context, db *dbopen.Database, o *benchOptions, stdout io.Writer) error {
	ro := o.rateOpts
	if ro.producer != "sql" && ro.producer != "writer" {
		return fmt.Errorf("--producer %q: give sql or writer", ro.producer)
	}
	rb := &rateBench{o: o, db: db, relay: db, biz: db.Store.Tables().Outbox + "_biz", conns: 16, prefix: benchMsgIDPrefix + randomPrefix()}
	rb.conns = o.producers
	if db.Dialect != "sqlite" {
		relayDB := *o.db
		relayDB.DSN = withAppName(o.db.DSN, benchRelayApp)
		rdb, err := relayDB.Open(ctx, false)
		if err != nil {
			return err
		}
		defer rdb.Close()
		rb.relay = rdb
	}
	recv, err := startRateReceiver()
	if err != nil {
		return err
	}
	defer recv.close()
	rb.recv = recv
	pub, closePub, err := brokers.Open(ctx, recv.url, o.pub)
	if err != nil {
		return err
	}
	defer closePub()
	rb.pub = pub
	if err := rb.createBiz(ctx); err != nil {
		return err
	}
	if !o.keep {
		defer rb.exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+rb.biz)
	}
	fmt.Fprintf(stdout, "bench: %s, relay default config, webhook to a local receiver; producers=%d (%s) rate=%d/s duration=%s runs=%d\n",
		db.Where, rb.conns, ro.producer, ro.rate, ro.duration, o.runs)
	idle := ""
	if ro.idle > 0 {
		pct, err := rb.idleCPU(ctx, stdout)
		if err != nil {
			return err
		}
		idle = fmt.Sprintf(" idle_pct=%.2f", pct)
	}
	if ro.rate == 0 {
		fmt.Fprintf(stdout, "result%s\n", idle)
		return nil
	}
	return rb.rateRuns(ctx, stdout, idle)
}

// rateRuns runs --runs runs of the producers alone and then beside the
// relay, and prints the medians.
func (rb *rateBench) rateRuns(ctx context.Context, stdout io.Writer, idle string) error {
	var rates, p50s, p99s, maxes, ratios []float64
	for run := 1; run <= rb.o.runs; run++ {
		alone, err := rb.produce(ctx, fmt.Sprintf("a%d", run), false)
		if err != nil {
			return err
		}
		if err := rawStore(rb.db).Truncate(ctx); err != nil {
			return err
		}
		res, err := rb.withRelay(ctx, fmt.Sprintf("r%d", run))
		if err != nil {
			return err
		}
		ratio := res.rate / alone
		fmt.Fprintf(stdout, "run %d: producers alone %.0f/s, beside the relay %.0f/s (ratio %.3f); commit→publish p50 %.1fms p99 %.1fms max %.1fms; "+
			"%d published, last %.0fms after the producers stopped\n",
			run, alone, res.rate, ratio, res.p50, res.p99, res.max, res.n, res.drain.Seconds()*1000)
		rates, p50s, p99s, maxes, ratios = append(rates, res.rate), append(p50s, res.p50), append(p99s, res.p99), append(maxes, res.max), append(ratios, ratio)
		if err := rawStore(rb.db).Truncate(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "result rate=%.0f p50_ms=%.1f p99_ms=%.1f max_ms=%.1f producer_ratio=%.3f%s\n",
		median(rates), median(p50s), median(p99s), median(maxes), median(ratios), idle)
	return nil
}

// rateResult is one half-run beside the relay.
type rateResult struct {
	rate          float64
	p50, p99, max float64 // ms
	n             int
	drain         time.Duration
}

// withRelay runs the producers beside a relay and waits for every message.
func (rb *rateBench) withRelay(ctx context.Context, tag string) (rateResult, error) {
	stop, err := rb.startRelay(ctx)
	if err != nil {
		return rateResult{}, err
	}
	defer stop()
	rb.recv.reset()
	// Let the relay settle into its idle wait, as a running relay would be.
	time.Sleep(time.Second)
	rate, err := rb.produce(ctx, tag, true)
	if err != nil {
		return rateResult{}, err
	}
	stopped := time.Now()
	want := int(rb.recv.committed.Load())
	deadline := time.Now().Add(30 * time.Second)
	for rb.recv.count() < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	lat, last := rb.recv.latencies()
	res := rateResult{rate: rate, n: len(lat), p50: percentile(lat, 0.50), p99: percentile(lat, 0.99), max: percentile(lat, 1)}
	if last.After(stopped) {
		res.drain = last.Sub(stopped)
	}
	if len(lat) < want {
		return res, fmt.Errorf("%d of %d committed messages published within 30s after the producers stopped", len(lat), want)
	}
	return res, nil
}

// startRelay runs a relay with the default config on the relay's database.
func (rb *rateBench) startRelay(ctx context.Context) (stop func(), err error) {
	r, err := outbox.NewRelay(rb.relay.Store, rb.pub, outbox.RelayConfig{
		Interval: rb.o.rateOpts.interval, NoWatch: rb.o.rateOpts.noWatch, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(rctx)
	}()
	return func() { cancel(); <-done }, nil
}

// idleCPU runs the relay on the empty table and measures its CPU and that of
// its database backends (a PostgreSQL server on the same host; SQLite runs
// in the relay) as % of one core.
func (rb *rateBench) idleCPU(ctx context.Context, stdout io.Writer) (float64, error) {
	stop, err := rb.startRelay(ctx)
	if err != nil {
		return 0, err
	}
	defer stop()
	time.Sleep(2 * time.Second) // the wait grows to its longest
	pids, err := rb.relayBackends(ctx)
	if err != nil {
		return 0, err
	}
	self0, db0 := selfCPU(), pidsCPU(pids)
	start := time.Now()
	time.Sleep(rb.o.rateOpts.idle)
	wall := time.Since(start)
	self, dbCPU := selfCPU()-self0, pidsCPU(pids)-db0
	pct := func(d time.Duration) float64 { return 100 * d.Seconds() / wall.Seconds() }
	fmt.Fprintf(stdout, "idle over %s: relay %.2f%% of a core, its %d database backends %.2f%%, together %.2f%%\n",
		wall.Round(time.Millisecond), pct(self), len(pids), pct(dbCPU), pct(self+dbCPU))
	return pct(self + dbCPU), nil
}

// active reports whether a --rate or --idle bench was asked for.
func (r *rateOptions) active() bool { return r.rate > 0 || r.idle > 0 }

// benchRelayApp is the application_name of the relay's PostgreSQL
// connections, by which idleCPU finds their backends.
const benchRelayApp = "outbox_bench_relay"

// withAppName sets the application_name of a PostgreSQL URL DSN.
func withAppName(dsn, name string) string {
	if !strings.HasPrefix(dsn, "postgres") || !strings.Contains(dsn, "://") || strings.Contains(dsn, "application_name") {
		return dsn
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "application_name=" + name
}

// relayBackends lists the PIDs of the relay's PostgreSQL backends.
func (rb *rateBench) relayBackends(ctx context.Context) ([]int, error) {
	if rb.db.PG == nil {
		return nil, nil
	}
	rows, err := rb.db.PG.Pool().Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", benchRelayApp)
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out, err
}

func selfCPU() time.Duration {
	_, t, _ := procStat(os.Getpid())
	return t
}

func pidsCPU(pids []int) time.Duration {
	var sum time.Duration
	for _, p := range pids {
		if _, t, ok := procStat(p); ok {
			sum += t
		}
	}
	return sum
}

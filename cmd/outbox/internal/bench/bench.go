// Package bench is `outbox bench`: it measures the relay's throughput and
// latency on a table of its own, through discard:, a webhook or a broker.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/brokers"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/sqlstore"
	"github.com/outbox-go/outbox/outboxdriver"
)

type benchOptions struct {
	db           *dbopen.Options
	broker       string
	messages     int
	batch        int
	relays       int
	producers    int
	payloadBytes int
	runs         int
	keep         bool
	force        bool
	writer       bool
	baseline     bool
	scaling      bool
	poisonRun    bool
	cdc          bool
	keys         int
	blocked      bool
	// fillKeys, when above 0, gives fill's messages that many keys, and
	// blockedMsgs of them are never sent (held back behind a refused one).
	fillKeys, blockedMsgs int
	// poison, when set, is a row fill writes after the first half.
	poison     *outbox.Message
	cpuProfile string
	round      time.Duration
	meter      *cpuMeter
	pub        brokers.PublisherOptions
	rateOpts   *rateOptions
	// hint points usage errors at the usage text.
	hint string
}

// Run runs `outbox bench`: it fills (or, with --producers, concurrently
// produces) messages on a table of its own, runs the relays until every
// message is acked, and prints throughput and latency. Its last line is
// `result msgs_per_s=<n> p50_ms=<n> p99_ms=<n>` (medians over --runs).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseBenchFlags(args, stdout)
	if err != nil {
		return err
	}
	var closers cli.CloseStack
	defer closers.Close()
	db, err := prepareBench(ctx, o, &closers)
	if err != nil {
		return err
	}
	switch {
	case o.rateOpts.active():
		return benchRate(ctx, db, o, stdout)
	case o.writer && o.keys > 0:
		return benchWriterKeys(ctx, db, o, stdout)
	case o.writer:
		return benchWriter(ctx, db, o, stdout)
	case o.cdc:
		o.meter = newCPUMeter(db.Dialect, "discard")
		return benchCDC(ctx, db, o, stdout)
	case o.poisonRun:
		o.meter = newCPUMeter(db.Dialect, "http")
		return benchPoison(ctx, db, o, stdout)
	}
	bb, pubs, err := openBenchPublishers(ctx, db, o, stdout, &closers)
	if err != nil {
		return err
	}
	if o.keys > 0 {
		return benchKeys(ctx, db, pubs, o, stdout)
	}
	return benchRelayRuns(ctx, db, bb, pubs, o, stdout)
}

// parseBenchFlags reads the command line of outbox bench. It returns a
// usage error for a bad flag or a combination that measures nothing.
func parseBenchFlags(args []string, stdout io.Writer) (*benchOptions, error) {
	f, o := newBenchFlags(stdout)
	pos, err := f.Parse(args)
	if err != nil {
		return nil, err
	}
	if err := cli.NoArgs(f, pos); err != nil {
		return nil, err
	}
	o.hint = f.Hint()
	if err := o.validate(o.hint); err != nil {
		return nil, err
	}
	if o.writer && o.producers == 0 {
		o.producers = 8
	}
	if o.rateOpts.active() && o.producers == 0 {
		o.producers = 16
	}
	return o, nil
}

// newBenchFlags is the flag set of outbox bench, filling the options it
// returns.
func newBenchFlags(stdout io.Writer) (*cli.FlagSet, *benchOptions) {
	f := cli.NewFlagSet("outbox bench", "--db DSN --broker URL [flags]",
		"measure the relay's throughput and latency on a table of its own", stdout)
	o := &benchOptions{db: dbopen.AddFlags(f)}
	f.SetDefault("table", "outbox_bench")
	f.SetDefault("inbox-table", "outbox_bench_inbox")
	o.db.Table, o.db.InboxTable = "outbox_bench", "outbox_bench_inbox"
	f.StringVar(&o.broker, "broker", "discard:", "URL", "where to publish: discard:, nats://, amqp://, kafka://, kfake: (an in-process fake Kafka), redis://, mqtt://, http(s)://; for a broker, each run also measures the broker's own acked publish rate and the relay's rate with discard:")
	f.IntVar(&o.messages, "messages", 100000, "N", "messages per run")
	f.IntVar(&o.batch, "batch", 500, "N", "relay batch size")
	f.IntVar(&o.relays, "relays", 1, "N", "relays running at once on the table")
	f.IntVar(&o.producers, "producers", 0, "N", "producers writing one message per transaction while the relays run (0: fill the table first)")
	f.IntVar(&o.payloadBytes, "payload-bytes", 200, "N", "size of each JSON payload")
	f.IntVar(&o.runs, "runs", 1, "N", "runs on the same table, one after another (the table is emptied once, at the start)")
	f.BoolVar(&o.keep, "keep", "keep the rows after the last run (default: empty the table)")
	f.BoolVar(&o.force, "force", "empty --table (and on PostgreSQL --inbox-table) even if it holds rows bench did not write; without it bench refuses such a table")
	f.BoolVar(&o.writer, "writer", "measure the writer instead: a business transaction with and without an outbox insert, --producers at once (default 8); shapes order and transfer (Writer.Write), and on PostgreSQL batched (QueueWrite) and on-commit (WriteOnCommit)")
	f.BoolVar(&o.baseline, "baseline", "PostgreSQL: before each run, run a bare hand-written pgx claim/mark loop on the same table and print relay/baseline")
	f.BoolVar(&o.scaling, "scaling", "with --relays N above 1: before each run, run one relay on the same table, and print N relays / one relay and how far the cores would let that ratio go at one relay's CPU per message")
	f.BoolVar(&o.poisonRun, "poison", "each run relays --messages twice, with and without one poison message among them, and prints both rates and poison_ratio; through a local webhook receiver that drops the connection on the poison (--broker discard:, the default), or RabbitMQ (--broker amqp://..., the poison with a 200 KB header)")
	f.BoolVar(&o.cdc, "cdc", "PostgreSQL with wal_level = logical and a role with REPLICATION: each run relays --messages twice to discard:, through the polling relay and through the CDC relay (as outbox relay --cdc runs it), alternating which goes first, and prints both rates and cdc_ratio; in both the relay runs before the messages are written, in transactions of --batch")
	f.IntVar(&o.keys, "keys", 0, "N", "each run relays --messages twice, without keys and spread over N keys, and prints keyed/unkeyed; with --writer, the writer's rounds with and without a key")
	f.BoolVar(&o.blocked, "blocked", "with --keys: each run also relays the keyed messages with the first message of one key refused, and prints the other keys' rate / the keyed rate")
	f.DurationVar(&o.round, "round", 3*time.Second, "with --writer: length of one round of each variant")
	addRateFlags(f, o)
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "FILE", "write a Go CPU profile of the runs to FILE (go tool pprof)")
	f.StringVar(&o.pub.Source, "source", "", "URI", "CloudEvents source attribute (default: the broker URL's source parameter, where the broker takes one, else \"/outbox\")")
	f.DurationVar(&o.pub.WebhookTimeout, "webhook-timeout", 10*time.Second, "per-request timeout of the webhook")
	f.Note("The table (default outbox_bench) is created if needed and EMPTIED before the first run, on PostgreSQL with\n" +
		"--inbox-table: never point --table at a production table. Bench refuses a table that holds rows it did not\n" +
		"write (the msg_id of every row it writes starts with " + benchMsgIDPrefix + ") unless --force is given.")
	f.CommandLineOnly("it empties its tables and publishes made-up\n" +
		"messages, so a shell set up for the relay (OUTBOX_DB, OUTBOX_TABLE, OUTBOX_BROKER, ...) must not aim it\n" +
		"at the relay's database, tables or broker.")
	f.Note("Latency: with --producers, from the message's commit (created_at) to its mark; without, the time of one batch from claim to mark.")
	f.Note("For the writer target: outbox bench --writer --db DSN --producers 8. For ageing: --runs 11 --messages 100000 prints last/first. For scaling: --relays 2 --scaling.")
	f.Example("outbox bench --db postgres://postgres@127.0.0.1:5432/test --broker discard: --messages 100000 --batch 500 --runs 3")
	f.Example("outbox bench --db postgres://postgres@127.0.0.1:5432/test --cdc --messages 100000 --runs 3")
	f.Example("outbox bench --db sqlite:/tmp/bench.db --messages 200000 --relays 1")
	return f, o
}

// validate refuses flags out of range and combinations that measure
// nothing, with usage errors that point at hint.
func (o *benchOptions) validate(hint string) error {
	switch {
	case o.messages < 1:
		return cli.Usagef(hint, "--messages must be at least 1")
	case o.batch < 1 || o.batch > 10000:
		return cli.Usagef(hint, "--batch must be 1..10000")
	case o.relays < 1 || o.relays > 64:
		return cli.Usagef(hint, "--relays must be 1..64")
	case o.producers < 0 || o.producers > 256:
		return cli.Usagef(hint, "--producers must be 0..256")
	case o.payloadBytes < 16 || o.payloadBytes > outbox.DefaultMaxBytes:
		return cli.Usagef(hint, "--payload-bytes must be 16..%d", outbox.DefaultMaxBytes)
	case o.runs < 1:
		return cli.Usagef(hint, "--runs must be at least 1")
	case o.round < 10*time.Millisecond:
		return cli.Usagef(hint, "--round must be at least 10ms")
	case o.scaling && o.relays < 2:
		return cli.Usagef(hint, "--scaling compares --relays N with one relay: give --relays 2 or more")
	case o.poisonRun && (o.writer || o.scaling || o.baseline || o.producers > 0):
		return cli.Usagef(hint, "--poison fills the table first and compares two relay runs: drop --writer, --scaling, --baseline and --producers")
	case o.keys < 0 || o.keys > o.messages:
		return cli.Usagef(hint, "--keys must be 0..--messages")
	case o.blocked && o.keys == 0:
		return cli.Usagef(hint, "--blocked blocks one key of --keys N: give --keys")
	case o.keys > 0 && (o.scaling || o.baseline || o.poisonRun || o.producers > 0 && !o.writer):
		return cli.Usagef(hint, "--keys compares keyed and unkeyed runs: drop --scaling, --baseline, --poison and --producers")
	case o.cdc && (o.writer || o.scaling || o.baseline || o.poisonRun || o.keys > 0 || o.producers > 0 || o.relays > 1 || o.rateOpts.active()):
		return cli.Usagef(hint, "--cdc compares one CDC relay with one polling relay: drop --writer, --scaling, --baseline, --poison, --keys, --producers, --relays and the rate flags")
	case o.cdc && !strings.HasPrefix(strings.ToLower(o.broker), "discard:"):
		return cli.Usagef(hint, "--cdc publishes to discard:: drop --broker")
	case o.scaling && o.writer:
		return cli.Usagef(hint, "--scaling measures relays; --writer measures the writer: give one of them")
	}
	return nil
}

// prepareBench opens the database with a pool for every relay and
// producer, checks, creates and empties the bench's tables, and starts the
// CPU profile of --cpuprofile. It pushes on closers what is to be undone
// after the figures are out: the profile, the rows (unless --keep) and the
// database.
func prepareBench(ctx context.Context, o *benchOptions, closers *cli.CloseStack) (*dbopen.Database, error) {
	conns := 2*o.relays + o.producers + 4 // each relay may hold a claim ahead
	o.db.DSN = dbopen.WithPoolSize(o.db.DSN, conns)
	db, err := o.db.Open(ctx, false)
	if err != nil {
		return nil, err
	}
	closers.Push(db.Close)
	if o.cdc {
		if err := cdcPreflight(ctx, db); err != nil {
			return nil, err
		}
	}
	if !o.force {
		if err := checkBenchTables(ctx, db, o.hint); err != nil {
			return nil, err
		}
	}
	if err := db.Store.Migrate(ctx); err != nil {
		return nil, err
	}
	st := rawStore(db)
	if err := st.Truncate(ctx); err != nil {
		return nil, err
	}
	if !o.keep {
		cleanupCtx := context.WithoutCancel(ctx)
		closers.Push(func() { _ = st.Truncate(cleanupCtx) }) // best-effort cleanup after the figures are out
	}
	if o.cpuProfile != "" {
		pf, err := os.Create(o.cpuProfile)
		if err != nil {
			return nil, err
		}
		closers.Push(func() { _ = pf.Close() }) // a developer's profile; pprof.StopCPUProfile has written it
		if err := pprof.StartCPUProfile(pf); err != nil {
			return nil, err
		}
		closers.Push(pprof.StopCPUProfile)
	}
	return db, nil
}

// openBenchPublishers prepares the broker of --broker (nil for discard:
// and webhooks) and opens the relays' publishers through it, pushing on
// closers what is to be closed.
func openBenchPublishers(ctx context.Context, db *dbopen.Database, o *benchOptions, stdout io.Writer, closers *cli.CloseStack) (*brokerBench, []outbox.Publisher, error) {
	bb, err := newBrokerBench(ctx, o.broker, stdout)
	if err != nil {
		return nil, nil, err
	}
	scheme, _, _ := strings.Cut(strings.ToLower(o.broker), ":")
	o.meter = newCPUMeter(db.Dialect, scheme)
	brokerURL := o.broker
	if bb != nil && o.baseline {
		bb.close()
		return nil, nil, cli.Usagef(o.hint, "--baseline is the bare PostgreSQL loop, for --broker discard:; with a broker, each run measures the broker's own rate and the relay with discard: anyway")
	}
	if bb != nil {
		closers.Push(bb.close)
		brokerURL = bb.url
	}
	// Through a broker each relay gets a publisher (a connection) of its
	// own, as `outbox relay --workers` gives each worker, so that one
	// connection's window of unacknowledged messages does not cap them all.
	pubs := make([]outbox.Publisher, 1, o.relays)
	pub, closePub, err := brokers.Open(ctx, brokerURL, o.pub)
	if err != nil {
		return nil, nil, err
	}
	closers.Push(closePub)
	pubs[0] = pub
	for bb != nil && len(pubs) < o.relays {
		p, closeP, err := brokers.Open(ctx, brokerURL, o.pub)
		if err != nil {
			return nil, nil, err
		}
		closers.Push(closeP)
		pubs = append(pubs, p)
	}
	return bb, pubs, nil
}

// scalingCap is the most that relays can gain over one relay that kept the
// cores util busy (0..1), if their CPU per message stays one relay's: the
// cores cannot be more than all busy, and n relays cannot do more than n
// times one.
func scalingCap(relays int, util float64) float64 {
	return min(float64(relays), 1/util)
}

// rawStore is the SQL store under the driver, for Truncate.
func rawStore(db *dbopen.Database) *sqlstore.Store {
	s, _ := sqlstore.Of(db.Store)
	return s
}

func randomPrefix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

type benchResult struct {
	done, dead int64
	elapsed    time.Duration
	p50, p99   float64
	batches    int
	cpu        cpuUse
	// busy is the share of the run each relay spent, on average, in claims,
	// publishes and marks (stage times over relays × elapsed).
	busy [3]float64
	// poisonFailed counts the attempts of the run's poison that failed.
	poisonFailed int64
	// heldBack counts the messages claimed and held back behind an earlier
	// message of their key (each time it happened).
	heldBack int64
}

// micros formats a per-message duration in microseconds.
func micros(d time.Duration) string { return fmt.Sprintf("%.1fµs", float64(d.Nanoseconds())/1000) }

func (r benchResult) rate() float64 { return float64(r.done) / r.elapsed.Seconds() }

func (r benchResult) extra() string {
	s := fmt.Sprintf(" (%d batches; a relay's time in claims %.0f%%, publishes %.0f%%, marks %.0f%%)",
		r.batches, 100*r.busy[0], 100*r.busy[1], 100*r.busy[2])
	if r.cpu.ok {
		s += fmt.Sprintf("; machine CPU %s/msg, %.0f%% busy", micros(r.cpu.perMsg), 100*r.cpu.util)
		if p := r.cpu.byProcess(); p != "" {
			s += " (" + p + ")"
		}
	}
	if r.dead > 0 {
		s += fmt.Sprintf(", %d DEAD", r.dead)
	}
	return s
}

// benchHook counts finished messages and collects latencies.
type benchHook struct {
	target    int64
	endToEnd  bool
	done      atomic.Int64
	dead      atomic.Int64
	finished  chan struct{}
	closeOnce sync.Once
	mu        sync.Mutex
	lat       []float64
	batches   int
	heldBack  int64
	end       time.Time
	// stages sums the batches' claim, publish and mark durations.
	stages [3]time.Duration
	// poison is the msg_id of the run's poison, whose attempts that were
	// not sent poisonFailed counts.
	poison       string
	poisonFailed atomic.Int64
}

func (h *benchHook) OnBatch(_ context.Context, rep outbox.BatchReport) {
	now := time.Now()
	h.mu.Lock()
	h.batches++
	h.heldBack += int64(rep.HeldBack)
	h.stages[0] += rep.ClaimDuration
	h.stages[1] += rep.PublishDuration
	h.stages[2] += rep.MarkDuration
	if h.endToEnd {
		for _, r := range rep.Results {
			if r.Outcome.Kind == outbox.OutcomeSent {
				h.lat = append(h.lat, float64(now.Sub(r.Message.CreatedAt).Microseconds())/1000)
			}
		}
	} else if len(rep.Results) > 0 {
		h.lat = append(h.lat, float64(rep.Duration.Microseconds())/1000)
	}
	h.mu.Unlock()
	if h.poison != "" {
		for _, r := range rep.Results {
			if r.Message.MsgID == h.poison && r.Outcome.Kind != outbox.OutcomeSent && r.Outcome.Kind != outbox.OutcomeRelease {
				h.poisonFailed.Add(1)
			}
		}
	}
	h.dead.Add(int64(rep.Dead))
	if h.done.Add(int64(rep.Sent+rep.Dead)) >= h.target {
		h.closeOnce.Do(func() {
			h.end = now
			close(h.finished)
		})
	}
}

// benchRun runs o.relays relays, the i-th publishing through pubs[i % len(pubs)].
func benchRun(ctx context.Context, db *dbopen.Database, pubs []outbox.Publisher, o *benchOptions, prefix string) (benchResult, error) {
	payload := benchPayload(o.payloadBytes)
	if o.producers == 0 {
		if err := fill(ctx, db, prefix, o.messages, o.fillKeys, payload, o.poison); err != nil {
			return benchResult{}, err
		}
	}
	hook := &benchHook{target: int64(o.messages - o.blockedMsgs), endToEnd: o.producers > 0, finished: make(chan struct{})}
	if o.poison != nil {
		hook.poison = o.poison.MsgID
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var wg sync.WaitGroup
	relayErr := make(chan error, o.relays+o.producers)
	cpu := o.meter.sample()
	start := time.Now()
	for i := range o.relays {
		r, err := outbox.NewRelay(db.Store, pubs[i%len(pubs)], outbox.RelayConfig{BatchSize: o.batch, Interval: 5 * time.Millisecond,
			Logger: quiet, Hooks: []any{hook}})
		if err != nil {
			return benchResult{}, err
		}
		wg.Add(1)
		go func() { defer wg.Done(); relayErr <- r.Run(runCtx) }()
	}
	if o.producers > 0 {
		per := (o.messages + o.producers - 1) / o.producers
		for p := range o.producers {
			n := min(per, o.messages-p*per)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := produce(runCtx, db, fmt.Sprintf("%s-p%d", prefix, p), n, payload); err != nil && runCtx.Err() == nil {
					relayErr <- err
				}
			}()
		}
	}
	var err error
	var use cpuUse
	select {
	case <-hook.finished:
		use = o.meter.since(cpu, hook.done.Load())
	case <-ctx.Done():
	case err = <-relayErr:
	}
	cancel()
	wg.Wait()
	if err != nil {
		return benchResult{}, err
	}
	res := benchResult{done: hook.done.Load(), dead: hook.dead.Load(), elapsed: hook.end.Sub(start), batches: hook.batches, cpu: use,
		poisonFailed: hook.poisonFailed.Load(), heldBack: hook.heldBack}
	if hook.end.IsZero() {
		res.elapsed = time.Since(start)
	}
	for i, d := range hook.stages {
		res.busy[i] = d.Seconds() / (float64(o.relays) * res.elapsed.Seconds())
	}
	res.p50, res.p99 = percentile(hook.lat, 0.50), percentile(hook.lat, 0.99)
	return res, nil
}

// produce writes n messages, one per transaction, as a service would.
func produce(ctx context.Context, db *dbopen.Database, prefix string, n int, payload func(int) json.RawMessage) error {
	for i := range n {
		m := outbox.Message{MsgID: fmt.Sprintf("%s-%d", prefix, i), Topic: benchTopic, Payload: payload(i)}
		if err := writeTx(ctx, db, []outbox.Message{m}); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	return nil
}

func writeTx(ctx context.Context, db *dbopen.Database, msgs []outbox.Message) error {
	if db.PG != nil {
		return writeWith(ctx, db.PG, msgs)
	}
	return writeWith(ctx, db.SQL, msgs)
}

// insertUnchecked inserts m without the Writer's validation, as a plain SQL
// INSERT of another program would.
func insertUnchecked(ctx context.Context, db *dbopen.Database, m outbox.Message) error {
	if db.PG != nil {
		return insertWith(ctx, db.PG, m)
	}
	return insertWith(ctx, db.SQL, m)
}

func insertWith[TTx any](ctx context.Context, d outboxdriver.Driver[TTx], m outbox.Message) error {
	return d.RunInTx(ctx, func(ctx context.Context, tx TTx) error { return d.InsertTx(ctx, tx, []outbox.Message{m}) })
}

func writeWith[TTx any](ctx context.Context, d outboxdriver.Driver[TTx], msgs []outbox.Message) error {
	w, err := outbox.NewWriter(d, outbox.WriterConfig{})
	if err != nil {
		return err
	}
	return d.RunInTx(ctx, func(ctx context.Context, tx TTx) error { return w.Write(ctx, tx, msgs...) })
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[min(int(float64(len(s))*p), len(s)-1)]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

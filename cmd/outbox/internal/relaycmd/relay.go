// Package relaycmd is `outbox relay` and `outbox console`: the relay with its
// metrics, health, admin and tracing servers, and the console, which serves
// the same admin server without a relay.
package relaycmd

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
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/webhook"
)

type relayOptions struct {
	db                *dbopen.Options
	broker            string
	batch             int
	interval          time.Duration
	minInterval       time.Duration
	maxBatch          int
	noWatch           bool
	maxRetries        int
	retryBase         time.Duration
	retryMax          time.Duration
	publishTimeout    time.Duration
	source            string
	webhookSecret     string
	webhookSecretFile string
	webhookLegacy     bool
	webhookTimeout    time.Duration
	concurrency       int
	logFormat         string
	logLevel          string
	statsInterval     time.Duration
	workers           int
	metricsAddr       string
	admin             adminOptions
	cleanupAge        time.Duration
	cleanupInbox      time.Duration
	cleanupEvery      time.Duration
	cleanupDuty       float64
	retryBudget       time.Duration
	probeInterval     time.Duration
	stopKeyAtDead     bool
	cdc               cdcOptions
}

// Run runs `outbox relay` with args until ctx ends or the relay fails. It
// prints the help on stdout and logs on stderr.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, log, err := parseRelayFlags(args, stdout, stderr)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	p := &relayProcess{o: o, log: log}
	defer p.closers.Close()
	started, err := p.build(ctx)
	if err != nil || !started {
		return err
	}
	return p.run(ctx)
}

// parseRelayFlags reads the command line of outbox relay and the variables
// of its flags. It returns a usage error for a bad flag, and the logger of
// --log-format and --log-level, writing to stderr.
func parseRelayFlags(args []string, stdout, stderr io.Writer) (*relayOptions, *slog.Logger, error) {
	f := cli.NewFlagSet("outbox relay", "--db DSN --broker URL [flags]",
		"Move messages from the outbox table to a broker: claim a batch of NEW messages that are due,\n"+
			"publish it, and mark each message SENT, for retry, or DEAD after its last retry. Runs until\n"+
			"SIGTERM or SIGINT, then finishes the batch in flight and exits 0. Several relays may run\n"+
			"against one table. Logs go to stderr.", stdout)
	o := &relayOptions{db: dbopen.AddFlags(f)}
	f.StringVar(&o.broker, "broker", "", "URL",
		"where to publish: nats://host:4222, amqp://user:pass@host:5672/vhost, kafka://host:9092[,host2:9092], "+
			"redis://host:6379/0, mqtt://host:1883, http(s)://host/path (webhook) or discard: (acknowledge and drop, for tests); "+
			"query parameters set each broker's options (README, Brokers)").Required = true
	brokerTLS := brokers.AddTLSFlags(f)
	o.addDeliveryFlags(f)
	o.addWebhookFlags(f)
	o.addProcessFlags(f)
	o.addCleanupFlags(f)
	addRelayNotes(f)
	pos, err := f.Parse(args)
	if err != nil {
		return nil, nil, err
	}
	if err := cli.NoArgs(f, pos); err != nil {
		return nil, nil, err
	}
	if err := o.validate(f); err != nil {
		return nil, nil, err
	}
	o.broker = brokerTLS.Apply(o.broker)
	cli.AddSecret(o.admin.token)
	log, err := newLogger(cli.LogWriter{W: stderr}, o.logFormat, o.logLevel)
	if err != nil {
		return nil, nil, cli.Usagef(f.Hint(), "%v", err)
	}
	return o, log, nil
}

// addDeliveryFlags adds the flags of claiming, publishing and retrying.
func (o *relayOptions) addDeliveryFlags(f *cli.FlagSet) {
	f.IntVar(&o.batch, "batch", 500, "N", "most messages claimed and published at once, 1..10000")
	f.DurationVar(&o.interval, "interval", 500*time.Millisecond,
		"longest wait between two looks while no message comes; the wait starts at --min-interval after a look that found messages and doubles with each that finds none")
	f.DurationVar(&o.minInterval, "min-interval", 5*time.Millisecond, "wait after a look that found messages (at most --interval)")
	f.IntVar(&o.maxBatch, "max-batch", 2000, "N", "while batches come back full, each claim doubles its size from --batch up to this (at least --batch, at most 10000)")
	f.BoolVar(&o.noWatch, "no-watch", "do not watch for commits (PostgreSQL LISTEN, the SQLite file): only poll")
	addCDCFlags(f, &o.cdc)
	f.IntVar(&o.maxRetries, "max-retries", 10, "N", "failed attempts after which a message becomes DEAD")
	f.DurationVar(&o.retryBase, "retry-base", time.Second, "delay after a message's first failure; it doubles with each further failure, with jitter")
	f.DurationVar(&o.retryMax, "retry-max", 10*time.Minute, "longest delay between two attempts of a message")
	f.DurationVar(&o.retryBudget, "retry-budget", 24*time.Hour,
		"least time a refused message is retried: it becomes DEAD only after --max-retries failures and this long since it was written; 0 turns it off")
	f.DurationVar(&o.probeInterval, "probe-interval", time.Second,
		"while the broker is down, how often one message is tried; the relay resumes within about this long of the broker's return")
	f.DurationVar(&o.publishTimeout, "publish-timeout", 30*time.Second, "bound on publishing one batch")
	f.BoolVar(&o.stopKeyAtDead, "stop-key-at-dead",
		"keep a key stopped at a DEAD message: its later messages wait until 'outbox dead retry' or 'outbox dead drop' "+
			"(without it they flow on past the DEAD message; either way a key's messages go in id order)")
}

// addWebhookFlags adds the flags of the CloudEvents source and the webhook.
func (o *relayOptions) addWebhookFlags(f *cli.FlagSet) {
	f.StringVar(&o.source, "source", "", "URI", "CloudEvents source attribute of every message (default: the broker URL's source parameter, where the broker takes one, else \""+webhook.DefaultSource+"\")")
	f.StringVar(&o.webhookSecret, "webhook-secret", "", "SECRET",
		"sign each webhook request as Standard Webhooks do (headers webhook-id, webhook-timestamp, webhook-signature: "+
			"HMAC-SHA256); raw bytes or whsec_<base64>; prefer the variable or --webhook-secret-file, which ps does not show")
	f.StringVar(&o.webhookSecretFile, "webhook-secret-file", "", "PATH",
		"read webhook secrets from PATH, one a line (blank lines and lines starting with # ignored); with several, "+
			"each request carries a signature per secret, for a rotation; after --webhook-secret's")
	f.BoolVar(&o.webhookLegacy, "webhook-legacy-signature",
		"also send the signature of earlier releases, for receivers not yet moved: "+webhook.DefaultSignatureHeader+
			": sha256=<hex HMAC-SHA256 of the body> under the first secret (no timestamp: no protection against replays)")
	f.DurationVar(&o.webhookTimeout, "webhook-timeout", webhook.DefaultTimeout, "bound on one webhook request")
	f.IntVar(&o.concurrency, "concurrency", webhook.DefaultConcurrency, "N", "most webhook requests in flight at once")
}

// addProcessFlags adds the flags of the logs, the workers and the servers
// of the metrics and the console.
func (o *relayOptions) addProcessFlags(f *cli.FlagSet) {
	f.StringVar(&o.logFormat, "log-format", "text", "text|json", "log line format")
	f.StringVar(&o.logLevel, "log-level", "info", "LEVEL", "least important log lines shown: debug (a line per batch), info, warn or error")
	f.DurationVar(&o.statsInterval, "stats-interval", 10*time.Second, "how often to log the totals sent, retried and dead, when a batch ran since the last line; 0 turns it off")
	f.IntVar(&o.workers, "workers", 1, "N", "relays to run in this process on the same table, 1..64 (each claims its own batches; a PostgreSQL pool gets 2N+2 connections, as each relay may hold two claims, 4 more with --admin-addr and 1 with a cleanup, unless the DSN sets pool_max_conns)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "ADDR",
		"serve Prometheus metrics at http://ADDR/metrics while the relay runs, off unless set; ADDR is HOST:PORT or :PORT "+
			"(port 0 takes a free one, which the log names): messages by topic and outcome, batch durations, "+
			"the table's pending messages and the oldest one's age, Go runtime and process")
	f.StringVar(&o.admin.addr, "admin-addr", "", "ADDR",
		"serve the console at http://ADDR/ and the JSON admin API at http://ADDR/admin/ while the relay runs, off unless set: "+
			"backlog, DEAD messages, failure groups, and with --admin-writable retry and drop (docs/console.md); "+
			"an address that is not loopback needs a token, --admin-auth-header or --admin-insecure")
	addAdminFlags(f, &o.admin)
}

// addCleanupFlags adds the flags of the cleanup that runs beside the relays.
func (o *relayOptions) addCleanupFlags(f *cli.FlagSet) {
	f.DurationVar(&o.cleanupAge, "cleanup-older-than", 0,
		"delete SENT messages older than this while the relay runs, as 'outbox cleanup' does, e.g. 168h; 0 (the default) leaves them")
	f.DurationVar(&o.cleanupInbox, "cleanup-inbox-older-than", 0,
		"delete inbox records (consumed_msg) older than this while the relay runs, as 'outbox cleanup --inbox-older-than' does; "+
			"keep them longer than any redelivery; 0 (the default) leaves them")
	f.DurationVar(&o.cleanupEvery, "cleanup-interval", 10*time.Minute,
		"wait between two rounds of the cleanup flags; each round's last statement reads the whole table (outbox on PostgreSQL, inbox everywhere)")
	f.Float64Var(&o.cleanupDuty, "cleanup-duty-cycle", 1, "SHARE",
		"share of a cleanup round's time spent in DELETE statements, above 0 and at most 1, as 'outbox cleanup --duty-cycle'; "+
			"below 1 the cleanup waits between statements and takes less of the database from the relay")
}

// addRelayNotes adds the notes and examples of the usage text.
func addRelayNotes(f *cli.FlagSet) {
	f.Note("The servers of --metrics-addr and --admin-addr also answer, without the admin token,\n" +
		"GET " + LivenessPath + " (200 while the process runs) and GET " + ReadinessPath + " (200 when the database answers,\n" +
		"the tables are at the schema version this relay needs and no relay holds the broker or the\n" +
		"database for down; else 503 with the reason, e.g. \"not ready: connecting to the broker: ...\").\n" +
		"A broker that cannot be reached at start-up is tried again, with a growing pause, until it\n" +
		"answers or the relay is stopped; a bad URL or refused credentials end the relay at once.")
	f.Note(fmt.Sprintf("The servers of --metrics-addr and --admin-addr each hold at most %d connections (more clients wait\n"+
		"to be accepted), and close one that takes over %s to send its headers, %s to send its\n"+
		"request, %s to be answered, or stays idle for %s; headers are limited to %d KiB.\n"+
		"Logs and error messages show URLs and DSNs with their passwords, tokens and secret query\n"+
		"values (token, key, signature...) masked as xxxxx.",
		HTTPMaxConns, HTTPReadHeaderTimeout, httpReadTimeout, httpWriteTimeout, httpIdleTimeout, httpMaxHeaderBytes>>10))
	f.Note(tracingNote)
	f.Example("outbox relay --db postgres://app@127.0.0.1:5432/app --broker https://example.com/events")
	f.Example("outbox relay --db postgres://app@127.0.0.1:5432/app --broker 'nats://127.0.0.1:4222?subject=orders.{topic}&stream=ORDERS'")
	f.Example("outbox relay --db mysql://root@127.0.0.1:3306/app --broker 'amqp://127.0.0.1:5672/?exchange=events'")
	f.Example("OUTBOX_DB=sqlite:app.db OUTBOX_BROKER=discard: outbox relay --log-level debug")
}

// startUpFailed returns err, the failure of a start-up step, unless SIGTERM
// or SIGINT (the end of ctx) cut that step short: a connection that had not
// answered yet fails with "context canceled". The relay then stops as it
// does after start-up, with status 0, and says where it was.
func startUpFailed(ctx context.Context, log *slog.Logger, err error) error {
	if ctx.Err() == nil {
		return err
	}
	log.Info("relay stopped during start-up", "cause", context.Cause(ctx), "interrupted", cli.OneLine(err.Error()))
	return nil
}

func (o *relayOptions) validate(f *cli.FlagSet) error {
	bad := func(format string, args ...any) error { return cli.Usagef(f.Hint(), "relay: "+format, args...) }
	switch {
	case o.batch < 1 || o.batch > 10000:
		return bad("--batch %d is out of range; use 1..10000", o.batch)
	case o.maxRetries < 1:
		return bad("--max-retries %d must be at least 1", o.maxRetries)
	case o.interval <= 0:
		return bad("--interval %s must be positive", o.interval)
	case o.retryBase <= 0:
		return bad("--retry-base %s must be positive", o.retryBase)
	case o.retryMax < o.retryBase:
		return bad("--retry-max %s is below --retry-base %s", o.retryMax, o.retryBase)
	case o.publishTimeout <= 0:
		return bad("--publish-timeout %s must be positive", o.publishTimeout)
	case o.retryBudget < 0:
		return bad("--retry-budget %s is negative; give a span such as 24h, or 0 to turn the budget off", o.retryBudget)
	case o.probeInterval <= 0:
		return bad("--probe-interval %s must be positive", o.probeInterval)
	case o.webhookTimeout <= 0:
		return bad("--webhook-timeout %s must be positive", o.webhookTimeout)
	case o.concurrency < 1:
		return bad("--concurrency %d must be at least 1", o.concurrency)
	case o.workers < 1 || o.workers > 64:
		return bad("--workers %d is out of range; use 1..64", o.workers)
	case o.statsInterval < 0:
		return bad("--stats-interval %s must not be negative (0 turns it off)", o.statsInterval)
	case o.cleanupAge < 0:
		return bad("--cleanup-older-than %s is negative; give an age such as 168h, or 0 to leave SENT messages", o.cleanupAge)
	case o.cleanupInbox < 0:
		return bad("--cleanup-inbox-older-than %s is negative; give an age such as 720h, or 0 to leave inbox records", o.cleanupInbox)
	case o.cleanupEvery <= 0:
		return bad("--cleanup-interval %s must be positive", o.cleanupEvery)
	case !(o.cleanupDuty > 0 && o.cleanupDuty <= 1):
		return bad("--cleanup-duty-cycle %v is out of range; give a share of time above 0 and at most 1, such as 0.2", o.cleanupDuty)
	case o.webhookLegacy && o.webhookSecret == "" && o.webhookSecretFile == "":
		return bad("--webhook-legacy-signature needs --webhook-secret or --webhook-secret-file")
	case o.admin.addr != "" && o.admin.addr == o.metricsAddr && !strings.HasSuffix(o.admin.addr, ":0"):
		return bad("--admin-addr and --metrics-addr are both %s; give each its own port", o.admin.addr)
	}
	if err := o.admin.validate("admin-addr", bad); err != nil {
		return err
	}
	for _, a := range [][2]string{{"metrics-addr", o.metricsAddr}} {
		if a[1] == "" {
			continue
		}
		if err := checkAddr(a[0], a[1]); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// webhookSecrets returns --webhook-secret followed by the secrets of
// --webhook-secret-file.
func (o *relayOptions) webhookSecrets() ([]string, error) {
	var secrets []string
	if o.webhookSecret != "" {
		secrets = append(secrets, o.webhookSecret)
	}
	if o.webhookSecretFile == "" {
		return secrets, nil
	}
	data, err := os.ReadFile(o.webhookSecretFile)
	if err != nil {
		return nil, fmt.Errorf("--webhook-secret-file %s: %w", o.webhookSecretFile, cli.UnwrapAll(err))
	}
	n := len(secrets)
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cli.AddSecret(line)
		secrets = append(secrets, line)
	}
	if len(secrets) == n {
		return nil, fmt.Errorf("--webhook-secret-file %s holds no secret; write one a line", o.webhookSecretFile)
	}
	return secrets, nil
}

// newLogger returns a logger writing to w in format "text" or "json", showing
// lines at level and above.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}

// relayTotals counts what the relay did since it started.
type relayTotals struct {
	batches, sent, retried, dead, released atomic.Int64
}

func (t *relayTotals) attrs() []any {
	return []any{"batches", t.batches.Load(), "sent", t.sent.Load(), "retried", t.retried.Load(),
		"dead", t.dead.Load(), "released", t.released.Load()}
}

// retryLogEvery is the least time between two log lines about a retried
// message.
const retryLogEvery = 10 * time.Second

// batchLogger is an outbox.BatchHook: it logs each batch at debug level, a
// message that will be retried at info level (one line per retryLogEvery at
// most, counting the others), and adds each batch to the totals.
type batchLogger struct {
	log    *slog.Logger
	totals *relayTotals

	mu        sync.Mutex
	lastRetry time.Time
	unlogged  int // retried messages since the last line
}

func (b *batchLogger) OnBatch(ctx context.Context, rep outbox.BatchReport) {
	b.totals.batches.Add(1)
	b.totals.sent.Add(int64(rep.Sent))
	b.totals.retried.Add(int64(rep.Retried))
	b.totals.dead.Add(int64(rep.Dead))
	b.totals.released.Add(int64(rep.Released))
	b.log.DebugContext(ctx, "batch", "messages", len(rep.Results), "sent", rep.Sent, "retried", rep.Retried,
		"dead", rep.Dead, "released", rep.Released, "duration", rep.Duration)
	if rep.Retried > 0 {
		b.logRetry(ctx, rep)
	}
}

// logRetry logs the first retried message of rep, unless a line was logged
// less than retryLogEvery ago.
func (b *batchLogger) logRetry(ctx context.Context, rep outbox.BatchReport) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unlogged += rep.Retried
	if time.Since(b.lastRetry) < retryLogEvery {
		return
	}
	for _, res := range rep.Results {
		if res.Outcome.Kind != outbox.OutcomeRetry {
			continue
		}
		m := res.Message
		b.log.InfoContext(ctx, "message refused; it will be retried", "msg_id", m.MsgID, "topic", m.Topic,
			"failures", m.Retries+1, "retry_in", res.Outcome.Delay.Round(time.Millisecond),
			"error", cli.Scrub(cli.OneLine(res.Outcome.Error)), "retried_since_last_line", b.unlogged)
		b.lastRetry, b.unlogged = time.Now(), 0
		return
	}
}

// budget maps --retry-budget to RelayConfig.RetryBudget, where 0 means the
// default and a negative value none.
func budget(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

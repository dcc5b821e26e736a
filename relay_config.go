package outbox

import (
	"fmt"
	"log/slog"
	"time"
)

// RelayConfig configures a Relay. Zero fields take their defaults.
type RelayConfig struct {
	// BatchSize is the most messages claimed and published at once. Defaults to 500.
	BatchSize int
	// Interval is the longest the relay waits between two looks for
	// messages while none come. A full batch is followed at once; after a
	// batch that was not full the relay waits MinInterval, and the wait
	// doubles with each look that finds nothing, up to Interval. A wake-up
	// (Wake, or the driver's outboxdriver.Watcher) ends the wait at once.
	// Defaults to 500ms.
	Interval time.Duration
	// MinInterval is the wait after a look that found messages. Defaults
	// to 5ms, or Interval when that is shorter.
	MinInterval time.Duration
	// MaxBatchSize caps the claim while batches keep coming back full:
	// each full batch doubles the next claim's limit, from BatchSize up to
	// MaxBatchSize, and a short one sets it back to BatchSize. Defaults to
	// BatchSize when BatchSize is set, else to 2000 (4×500).
	MaxBatchSize int
	// NoWatch turns off the driver's outboxdriver.Watcher: the relay then
	// only polls, and wakes early only on Wake.
	NoWatch bool
	// MaxRetries is the number of failed attempts after which a message becomes
	// DEAD. Defaults to 10.
	MaxRetries int
	// RetryBase is the delay after a message's first failure; each further
	// failure doubles it, with jitter. Defaults to 1s.
	RetryBase time.Duration
	// RetryMax caps the delay between a message's attempts. Defaults to 10m.
	RetryMax time.Duration
	// RetryBudget is the least time for which a refused message is retried:
	// it becomes DEAD only once it has failed MaxRetries times and
	// RetryBudget has passed since it was written, so that no outage shorter
	// than that can kill messages, whatever the broker answered. Its
	// attempts after the MaxRetries-th come RetryMax apart. A message the
	// transport can never carry (IsUndeliverable) is DEAD at once. A
	// negative value turns the budget off. Defaults to 24h.
	RetryBudget time.Duration
	// ProbeInterval is how often the relay tries one message while the
	// broker is down: it resumes within about ProbeInterval of the broker's
	// return. Defaults to 1s.
	ProbeInterval time.Duration
	// PublishTimeout bounds one Publish call. Defaults to 30s.
	PublishTimeout time.Duration
	// PauseBase is the first pause when the broker is down or the database
	// fails; it doubles while the trouble lasts, up to ProbeInterval for the
	// broker and up to PauseMax for the database. Defaults to 500ms.
	PauseBase time.Duration
	// PauseMax caps the pause after a database failure. It also caps the wait a broker asks for with
	// an unavailable error (an HTTP Retry-After; see RetryAfter): the relay
	// pauses for the longer of its own pause and the broker's wait, but never
	// longer than PauseMax, so that a mistaken or hostile "Retry-After: 86400"
	// stops the relay for PauseMax at most; a broker still not ready then
	// asks again. Defaults to 30s.
	PauseMax time.Duration
	// RescanInterval bounds how long the relay claims onward from its last
	// batch (past rows it has handled, whose dead index entries it so avoids)
	// before it claims from the first id again (a PostgreSQL store starts
	// that rescan at its low-water mark instead; see outboxpgx). Rows that
	// commit late, come due for a retry or are released below that point
	// wait at most this long under a sustained backlog; whenever the relay
	// catches up it claims from the first id at once. Defaults to 1s.
	RescanInterval time.Duration
	// Lease is how long a claimed batch is hidden from other relays: a claim
	// commits at once and holds its batch by this lease, never by an open
	// transaction. It must exceed PublishTimeout. Defaults to
	// 2×PublishTimeout.
	Lease time.Duration
	// Logger receives the relay's log lines; a DEAD message is logged at Error.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// StopKeyAtDead keeps a key stopped at a DEAD message: the later
	// messages of its key wait until a person retries or drops it (`outbox
	// dead retry`, `outbox dead drop`). Without it the key flows on past a
	// DEAD message, as it does past a SENT one. Either way a message with a
	// key is published only after every earlier message of its key is SENT
	// or DEAD (see outboxdriver.KeyOrderer). Defaults to false.
	StopKeyAtDead bool
	// Hooks are called after every finished batch: the relay calls those
	// that implement BatchHook and passes over the others, so that one list
	// can serve the writer, the relay and the cleaner (see Hook). A value
	// that implements no hook interface is refused. Defaults to none.
	Hooks []Hook
	// CDC takes the messages from the driver's change stream
	// (outboxdriver.Streamer), in commit order, instead of polling for them:
	// see Relay.Run. The driver must also implement outboxdriver.IDClaimer.
	// Defaults to false.
	CDC bool
	// SweepInterval is the wait between the polling sweeps of a CDC relay
	// while it streams or stands by. Defaults to 1s.
	SweepInterval time.Duration
}

// WithDefaults returns cfg with zero fields defaulted.
func (cfg RelayConfig) WithDefaults() RelayConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	batchSet := cfg.BatchSize != 0
	if !batchSet {
		cfg.BatchSize = 500
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 10
	}
	def(&cfg.Interval, 500*time.Millisecond)
	def(&cfg.RetryBase, time.Second)
	def(&cfg.RetryMax, 10*time.Minute)
	def(&cfg.RetryBudget, 24*time.Hour)
	def(&cfg.ProbeInterval, time.Second)
	def(&cfg.PublishTimeout, 30*time.Second)
	def(&cfg.PauseBase, 500*time.Millisecond)
	def(&cfg.PauseMax, 30*time.Second)
	def(&cfg.Lease, 2*cfg.PublishTimeout)
	def(&cfg.RescanInterval, time.Second)
	def(&cfg.SweepInterval, time.Second)
	cfg.waitDefaults(batchSet)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

func (cfg RelayConfig) validate() error {
	switch {
	case cfg.BatchSize < 1 || cfg.BatchSize > 10000:
		return fmt.Errorf("outbox: relay: BatchSize %d is out of range 1..10000", cfg.BatchSize)
	case cfg.MaxRetries < 1:
		return fmt.Errorf("outbox: relay: MaxRetries %d must be at least 1", cfg.MaxRetries)
	case cfg.Interval < 0, cfg.RetryBase < 0, cfg.PublishTimeout < 0, cfg.PauseBase < 0, cfg.RescanInterval < 0, cfg.ProbeInterval < 0, cfg.SweepInterval < 0:
		return fmt.Errorf("outbox: relay: durations must not be negative")
	case cfg.RetryMax < cfg.RetryBase:
		return fmt.Errorf("outbox: relay: RetryMax %s is below RetryBase %s", cfg.RetryMax, cfg.RetryBase)
	case cfg.PauseMax < cfg.PauseBase:
		return fmt.Errorf("outbox: relay: PauseMax %s is below PauseBase %s", cfg.PauseMax, cfg.PauseBase)
	case cfg.Lease <= cfg.PublishTimeout:
		return fmt.Errorf("outbox: relay: Lease %s must exceed PublishTimeout %s, or a slow publish could be claimed twice", cfg.Lease, cfg.PublishTimeout)
	}
	if err := checkHooks("NewRelay", cfg.Hooks); err != nil {
		return err
	}
	return cfg.validateWait()
}

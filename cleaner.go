package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

// CleanerConfig configures a Cleaner.
type CleanerConfig struct {
	// OlderThan is the age past which a SENT message is deleted: its sent_at
	// is older than the database clock minus OlderThan. Keep it longer than
	// anyone could need the row (a week: 168h). Defaults to 0: SENT messages
	// stay. OlderThan or InboxOlderThan is required.
	OlderThan time.Duration
	// InboxOlderThan is the age past which a record of the inbox table
	// (consumed_msg: which consumer group applied which msg_id) is deleted,
	// for every group. A message that arrives again after its record is
	// gone is applied again: keep the records longer than any message can
	// be delivered again (the broker's redelivery and retention, an
	// operator's `outbox dead retry` of a message that was published before
	// it went DEAD). Defaults to 0: records stay.
	InboxOlderThan time.Duration
	// Interval is the wait between two rounds. Defaults to 10m.
	Interval time.Duration
	// BatchSize is the most rows one DELETE statement removes, so that no
	// statement holds its locks for long. Defaults to 1000.
	BatchSize int
	// MaxBatches, when set, bounds one round; what is left waits for the
	// next round. Defaults to 0: a round goes on until no old row is left.
	MaxBatches int
	// DutyCycle is the share of a round's time that its DELETE statements
	// may take, in (0, 1]. After a statement that took d the cleaner waits
	// d×(1−DutyCycle)/DutyCycle before the next one, so that a large
	// backlog is worked off beside the relay instead of taking the
	// database's disk from it: at 0.2 the cleaner deletes about a fifth as
	// fast as it could. Defaults to 1: no wait.
	DutyCycle float64
	// Logger gets a line for each round that deleted rows, and for failures.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Hooks are called after every round of Run: the cleaner calls those
	// that implement CleanupHook and passes over the others, so that one
	// list can serve the writer, the relay and the cleaner (see Hook). A
	// value that implements no hook interface is refused. Defaults to none.
	Hooks []Hook
}

// WithDefaults returns cfg with zero fields defaulted.
func (cfg CleanerConfig) WithDefaults() CleanerConfig {
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Minute
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 1000
	}
	if cfg.DutyCycle == 0 {
		cfg.DutyCycle = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

func (cfg CleanerConfig) validate() error {
	switch {
	case cfg.OlderThan < 0 || cfg.InboxOlderThan < 0:
		return fmt.Errorf("outbox: CleanerConfig.OlderThan %v or InboxOlderThan %v is negative", cfg.OlderThan, cfg.InboxOlderThan)
	case cfg.OlderThan == 0 && cfg.InboxOlderThan == 0:
		return errors.New("outbox: CleanerConfig: give OlderThan, the age past which SENT messages are deleted (such as 168h), InboxOlderThan, the same for inbox records, or both")
	case cfg.Interval < 0:
		return fmt.Errorf("outbox: CleanerConfig.Interval %v is negative", cfg.Interval)
	case cfg.BatchSize < 1 || cfg.BatchSize > 100000:
		return fmt.Errorf("outbox: CleanerConfig.BatchSize %d is out of range; use 1..100000 (0 for the default)", cfg.BatchSize)
	case cfg.MaxBatches < 0:
		return fmt.Errorf("outbox: CleanerConfig.MaxBatches %d is negative", cfg.MaxBatches)
	case !(cfg.DutyCycle > 0 && cfg.DutyCycle <= 1):
		return fmt.Errorf("outbox: CleanerConfig.DutyCycle %v is out of range; use a share of time above 0 and at most 1, such as 0.2 (0 for the default, 1)", cfg.DutyCycle)
	}
	return checkHooks("NewCleaner", cfg.Hooks)
}

// Cleaner deletes old SENT messages from an outbox table, and old records
// from the inbox table beside it, round after round, as `outbox cleanup` does
// once: the maintenance that keeps the tables from growing for ever. NEW and
// DEAD messages are never deleted. Several cleaners on one table are safe;
// one is enough.
type Cleaner struct {
	store outboxdriver.Pruner
	cfg   CleanerConfig
	hooks []CleanupHook
	// wait replaces pause's timer in tests.
	wait func(ctx context.Context, d time.Duration) bool
}

// NewCleaner returns a Cleaner of store's tables. It refuses a config it
// cannot run: neither OlderThan nor InboxOlderThan, a negative age, Interval,
// BatchSize or MaxBatches, a DutyCycle outside (0, 1], a value in Hooks that
// is no hook.
func NewCleaner(store outboxdriver.Pruner, cfg CleanerConfig) (*Cleaner, error) {
	if store == nil {
		return nil, errors.New("outbox: NewCleaner: store is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Cleaner{store: store, cfg: cfg, hooks: hooksOf[CleanupHook](cfg.Hooks)}, nil
}

// Config returns the cleaner's configuration with its defaults filled in.
func (c *Cleaner) Config() CleanerConfig { return c.cfg }

// Run runs a round at once and then every Interval until ctx ends; it
// returns nil then. A failed round is logged and the next one comes after
// Interval as usual: the rows wait, nothing is lost.
func (c *Cleaner) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		rep, err := c.RunOnce(ctx)
		stopping := ctx.Err() != nil
		if stopping {
			err = nil // cut short by the stop, not failed: what it deleted still counts
		}
		for _, h := range c.hooks {
			h.OnCleanup(ctx, rep, err)
		}
		if stopping {
			return nil
		}
		switch {
		case err != nil:
			c.cfg.Logger.Warn("outbox cleaner: round failed; trying again after the interval",
				"error", err, "deleted_sent", rep.Sent, "deleted_consumed", rep.Consumed, "interval", c.cfg.Interval)
		case rep.Sent > 0 || rep.Consumed > 0:
			tables := c.store.Tables()
			c.cfg.Logger.Info("outbox cleaner: deleted old rows", "sent", rep.Sent, "table", tables.Outbox,
				"consumed", rep.Consumed, "inbox_table", tables.Inbox)
		}
		t.Reset(c.cfg.Interval)
	}
}

// CleanerReport is what one round of a Cleaner deleted.
type CleanerReport struct {
	// Sent is the number of SENT messages deleted from the outbox table.
	Sent int64
	// Consumed is the number of records deleted from the inbox table.
	Consumed int64
}

// RunOnce runs one round: it deletes SENT messages older than OlderThan,
// then inbox records older than InboxOlderThan (each when set), BatchSize
// at a time, until a batch is not full, MaxBatches (when set) have run or
// ctx ends, waiting between the statements as DutyCycle says. It returns
// how many it deleted, also when it fails part-way.
//
// The statements find the old rows without an index on their age: on
// PostgreSQL, whose claim keeps status out of every index, the outbox's last
// batch of a round, the one that finds no more, reads the whole table, and
// so does the inbox's on every database. Choose Interval with that in mind
// (docs/library.md gives the cost).
func (c *Cleaner) RunOnce(ctx context.Context) (CleanerReport, error) {
	var rep CleanerReport
	var err error
	if c.cfg.OlderThan > 0 {
		rep.Sent, err = c.drain(ctx, c.store.DeleteSent, c.cfg.OlderThan)
		if err != nil {
			return rep, fmt.Errorf("outbox cleaner: %w", err)
		}
	}
	if c.cfg.InboxOlderThan > 0 {
		rep.Consumed, err = c.drain(ctx, c.store.DeleteConsumed, c.cfg.InboxOlderThan)
		if err != nil {
			return rep, fmt.Errorf("outbox cleaner: %w", err)
		}
	}
	return rep, nil
}

// drain runs del, BatchSize rows at a time, until a batch is not full,
// MaxBatches have run or ctx ends, and returns how many it deleted. Between
// two statements it waits as DutyCycle says (dutyWait).
func (c *Cleaner) drain(ctx context.Context, del func(context.Context, time.Duration, int) (int64, error), age time.Duration) (int64, error) {
	var total int64
	for batches := 1; c.cfg.MaxBatches == 0 || batches <= c.cfg.MaxBatches; batches++ {
		start := time.Now()
		n, err := del(ctx, age, c.cfg.BatchSize)
		total += n
		if err != nil {
			return total, err
		}
		if n < int64(c.cfg.BatchSize) || ctx.Err() != nil {
			break
		}
		if !c.pause(ctx, dutyWait(time.Since(start), c.cfg.DutyCycle)) {
			break
		}
	}
	return total, nil
}

// dutyWait is the wait after a statement that took took, so that the
// statements take the share duty of the time: took×(1−duty)/duty.
func dutyWait(took time.Duration, duty float64) time.Duration {
	if duty >= 1 {
		return 0
	}
	return time.Duration(float64(took) * (1 - duty) / duty)
}

// pause waits d, or until ctx ends; it reports whether the wait ran out.
func (c *Cleaner) pause(ctx context.Context, d time.Duration) bool {
	if c.wait != nil {
		return c.wait(ctx, d)
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

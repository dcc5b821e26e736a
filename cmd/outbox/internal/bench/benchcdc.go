package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// cdcPreflight refuses, for bench --cdc, a database that cannot stream:
// anything but PostgreSQL, a wal_level other than logical, a role without
// REPLICATION.
func cdcPreflight(ctx context.Context, db *dbopen.Database) error {
	if db.PG == nil {
		return fmt.Errorf("--cdc compares the CDC relay (PostgreSQL logical replication) with polling: give a postgres:// --db, not %s", db.Dialect)
	}
	var walLevel, role string
	var repl bool
	err := db.PG.Pool().QueryRow(ctx, `SELECT current_setting('wal_level'), r.rolreplication OR r.rolsuper, current_user
FROM pg_roles AS r WHERE r.rolname = current_user`).Scan(&walLevel, &repl, &role)
	if err != nil {
		return fmt.Errorf("--cdc: read wal_level: %w", err)
	}
	if walLevel != "logical" {
		return fmt.Errorf("--cdc needs wal_level = logical, and this server has wal_level = %s: set wal_level = logical (and max_replication_slots, max_wal_senders to at least 2) in postgresql.conf and restart the server, or point --db at a server that has it", walLevel)
	}
	if !repl {
		return fmt.Errorf("--cdc needs a role that may replicate, and %s may not: ALTER ROLE %s REPLICATION, or give --db a role that has it", role, role)
	}
	return nil
}

// benchCDC runs `outbox bench --cdc`: each run relays --messages twice,
// through the polling relay and through the CDC relay (RelayConfig.CDC, as
// `outbox relay --cdc` starts it), alternating which goes first. In both,
// the relay runs first and is ready (the CDC relay streams) before the
// messages are written, in transactions of --batch, since the stream
// carries only what is committed after it starts; the time runs from the
// first write to the last ack. Its last line is `result
// cdc_msgs_per_s=<n> poll_msgs_per_s=<n> cdc_ratio=<n>` (medians over
// --runs).
func benchCDC(ctx context.Context, db *dbopen.Database, o *benchOptions, stdout io.Writer) error {
	st := rawStore(db)
	fmt.Fprintf(stdout, "bench: %s, broker discard: (CDC relay and polling relay): messages=%d batch=%d payload=%dB runs=%d\n",
		db.Where, o.messages, o.batch, o.payloadBytes, o.runs)
	prefix := benchMsgIDPrefix + randomPrefix()
	var cdcRates, pollRates, ratios []float64
	for run := 1; run <= o.runs; run++ {
		var rates [2]float64 // poll, cdc
		for k := range 2 {
			cdc := (run+k)%2 == 0
			if err := st.Truncate(ctx); err != nil {
				return err
			}
			name, what := fmt.Sprintf("%s-p%d", prefix, run), "polling"
			if cdc {
				name, what = fmt.Sprintf("%s-c%d", prefix, run), "cdc"
			}
			res, err := benchLiveRun(ctx, db, o, cdc, name)
			if err != nil {
				return err
			}
			if ctx.Err() != nil {
				return errors.New("bench interrupted")
			}
			if cdc {
				rates[1] = res.rate()
			} else {
				rates[0] = res.rate()
			}
			fmt.Fprintf(stdout, "run %d %s: %d msgs in %s = %.0f msgs/s%s\n",
				run, what, res.done, res.elapsed.Round(time.Millisecond), res.rate(), res.extra())
		}
		pollRates, cdcRates = append(pollRates, rates[0]), append(cdcRates, rates[1])
		ratios = append(ratios, rates[1]/rates[0])
		fmt.Fprintf(stdout, "run %d cdc/polling: %.0f / %.0f = %.2f\n", run, rates[1], rates[0], rates[1]/rates[0])
	}
	fmt.Fprintf(stdout, "result cdc_msgs_per_s=%.0f poll_msgs_per_s=%.0f cdc_ratio=%.2f\n", median(cdcRates), median(pollRates), median(ratios))
	return nil
}

// benchLiveRun starts one relay publishing to outbox.Discard, with CDC or
// polling, waits until it is ready, writes o.messages in transactions of
// o.batch and waits until every one is acked.
func benchLiveRun(ctx context.Context, db *dbopen.Database, o *benchOptions, cdc bool, prefix string) (benchResult, error) {
	payload := benchPayload(o.payloadBytes)
	hook := &benchHook{target: int64(o.messages), finished: make(chan struct{})}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := outbox.RelayConfig{BatchSize: o.batch, Interval: 5 * time.Millisecond, Logger: quiet, Hooks: []any{hook}}
	if cdc {
		cfg.CDC, cfg.SweepInterval = true, time.Second // outbox relay --cdc's default sweep
	}
	r, err := outbox.NewRelay(db.Store, outbox.Discard, cfg)
	if err != nil {
		return benchResult{}, err
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(1)
	go func() { defer wg.Done(); errs <- r.Run(runCtx) }()
	stop := func() { cancel(); wg.Wait() }
	if cdc {
		if err := waitStreaming(runCtx, db.PG); err != nil {
			stop()
			return benchResult{}, err
		}
	}
	cpu := o.meter.sample()
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := fillChunks(runCtx, db, prefix, o.messages, o.batch, payload); err != nil && runCtx.Err() == nil {
			errs <- err
		}
	}()
	var use cpuUse
	select {
	case <-hook.finished:
		use = o.meter.since(cpu, hook.done.Load())
	case <-ctx.Done():
	case err = <-errs:
		if err == nil {
			err = errors.New("the relay stopped before every message was acked")
		}
	}
	stop()
	if err != nil {
		return benchResult{}, err
	}
	res := benchResult{done: hook.done.Load(), dead: hook.dead.Load(), elapsed: hook.end.Sub(start), batches: hook.batches, cpu: use}
	if hook.end.IsZero() {
		res.elapsed = time.Since(start)
	}
	for i, d := range hook.stages {
		res.busy[i] = d.Seconds() / res.elapsed.Seconds()
	}
	res.p50, res.p99 = percentile(hook.lat, 0.50), percentile(hook.lat, 0.99)
	return res, nil
}

// waitStreaming waits until the store's change stream runs (StreamLag
// reports it), for at most 30s.
func waitStreaming(ctx context.Context, sl outboxdriver.StreamLagger) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := sl.StreamLag(); ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("--cdc: the CDC relay did not start streaming within 30s: check max_replication_slots and max_wal_senders, and that no other relay streams --table")
		}
		if !sleepFor(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func sleepFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// fillChunks writes n messages in transactions of chunk, as fill does.
func fillChunks(ctx context.Context, db *dbopen.Database, prefix string, n, chunk int, payload func(int) json.RawMessage) error {
	for start := 0; start < n; start += chunk {
		end := min(start+chunk, n)
		msgs := make([]outbox.Message, 0, end-start)
		for i := start; i < end; i++ {
			msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("%s-%d", prefix, i), Topic: benchTopic, Payload: payload(i)})
		}
		if err := writeTx(ctx, db, msgs); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	return nil
}

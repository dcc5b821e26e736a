package bench

import (
	"context"
	"errors"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"runtime"
	"time"

	"github.com/outbox-go/outbox"
)

// relayBench is the default target of outbox bench: --runs runs of the
// relays through pubs, each with the baselines its flags ask for, and the
// figures of every run for the medians of the last lines.
type relayBench struct {
	db     *dbopen.Database
	bb     *brokerBench // nil for discard: and webhooks
	pubs   []outbox.Publisher
	o      *benchOptions
	out    io.Writer
	prefix string

	rates, p50s, p99s, ratios, cpuCaps, scales, scaleCaps []float64
}

// brokerCeiling is what a run through a broker is compared with: the
// broker's own acked rate and the relay's rate with discard:, with the
// CPU each took.
type brokerCeiling struct {
	brokerRate, discardRate float64
	brokerCPU, discardCPU   cpuUse
}

// benchRelayRuns runs --runs runs of the relays through pubs and prints
// each run's figures, then the medians.
func benchRelayRuns(ctx context.Context, db *dbopen.Database, bb *brokerBench, pubs []outbox.Publisher, o *benchOptions, stdout io.Writer) error {
	fmt.Fprintf(stdout, "bench: %s, broker %s: messages=%d batch=%d relays=%d producers=%d payload=%dB runs=%d\n",
		db.Where, cli.RedactDSN(o.broker), o.messages, o.batch, o.relays, o.producers, o.payloadBytes, o.runs)
	b := &relayBench{db: db, bb: bb, pubs: pubs, o: o, out: stdout, prefix: benchMsgIDPrefix + randomPrefix()}
	for run := 1; run <= o.runs; run++ {
		if err := b.run(ctx, run); err != nil {
			return err
		}
	}
	b.summary()
	return nil
}

// run runs the baselines of run, then the relays, and prints the figures.
func (b *relayBench) run(ctx context.Context, run int) error {
	o, out := b.o, b.out
	base := 0.0
	if o.baseline {
		var err error
		if base, err = benchBaseline(ctx, b.db, o, fmt.Sprintf("%s-b%d", b.prefix, run)); err != nil {
			return err
		}
	}
	var ceiling brokerCeiling
	if b.bb != nil {
		var err error
		if ceiling, err = b.measureCeiling(ctx, run); err != nil {
			return err
		}
	}
	var one benchResult
	if o.scaling {
		o1 := *o
		o1.relays = 1
		var err error
		if one, err = benchRun(ctx, b.db, b.pubs[:1], &o1, fmt.Sprintf("%s-s%d", b.prefix, run)); err != nil {
			return err
		}
		fmt.Fprintf(out, "run %d one relay: %d msgs in %s = %.0f msgs/s%s\n",
			run, one.done, one.elapsed.Round(time.Millisecond), one.rate(), one.extra())
	}
	res, err := benchRun(ctx, b.db, b.pubs, o, fmt.Sprintf("%s-%d", b.prefix, run))
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return errors.New("bench interrupted")
	}
	kind := "batch latency"
	if o.producers > 0 {
		kind = "commit-to-mark latency"
	}
	fmt.Fprintf(out, "run %d: %d msgs in %s = %.0f msgs/s; %s p50=%.2fms p99=%.2fms%s\n",
		run, res.done, res.elapsed.Round(time.Millisecond), res.rate(), kind, res.p50, res.p99, res.extra())
	b.rates, b.p50s, b.p99s = append(b.rates, res.rate()), append(b.p50s, res.p50), append(b.p99s, res.p99)
	if b.bb != nil {
		b.printCeiling(run, res, ceiling)
	}
	if o.scaling {
		b.printScaling(run, res, one)
	}
	if base > 0 {
		b.ratios = append(b.ratios, res.rate()/base)
		fmt.Fprintf(out, "run %d baseline (bare pgx claim/mark loop): %.0f msgs/s; relay/baseline = %.2f\n", run, base, res.rate()/base)
	}
	return nil
}

// measureCeiling measures the broker's own acked rate and the relay's rate
// with discard: for run.
func (b *relayBench) measureCeiling(ctx context.Context, run int) (brokerCeiling, error) {
	var c brokerCeiling
	var err error
	if c.brokerRate, c.brokerCPU, err = b.bb.baselineRate(ctx, b.o); err != nil {
		return c, err
	}
	d, err := benchRun(ctx, b.db, []outbox.Publisher{outbox.Discard}, b.o, fmt.Sprintf("%s-d%d", b.prefix, run))
	if err != nil {
		return c, err
	}
	c.discardRate, c.discardCPU = d.rate(), d.cpu
	return c, nil
}

// printCeiling prints how the relay through the broker did in run against
// the slower of the broker's own rate and the relay's with discard:, and
// the CPU each took.
func (b *relayBench) printCeiling(run int, res benchResult, c brokerCeiling) {
	out := b.out
	// The target: at least 0.8 of the slower of the broker's own
	// acked rate and the relay's rate with discard:, both measured
	// in this run (BROKERS.md).
	ceiling := min(c.brokerRate, c.discardRate)
	b.ratios = append(b.ratios, res.rate()/ceiling)
	fmt.Fprintf(out, "run %d baselines: %s bare client %.0f msgs/s, relay with discard: %.0f msgs/s; relay/min(both) = %.2f\n",
		run, b.bb.adapter.Name, c.brokerRate, c.discardRate, res.rate()/ceiling)
	if !c.brokerCPU.ok || !c.discardCPU.ok || !res.cpu.ok {
		return
	}
	// The database, the broker and the relay share this
	// machine: relaying costs at least the CPU of both halves,
	// which caps the rate when the cores are the limit.
	capRate := float64(runtime.NumCPU()) / (c.brokerCPU.perMsg + c.discardCPU.perMsg).Seconds()
	b.cpuCaps = append(b.cpuCaps, capRate/ceiling)
	fmt.Fprintf(out, "run %d machine CPU per message (%d cores): broker alone %s (%.0f%% busy), relay with discard: %s (%.0f%%), relay through the broker %s (%.0f%%); "+
		"the first two together cap the relay at %.0f msgs/s = %.2f of min(both)\n",
		run, runtime.NumCPU(), micros(c.brokerCPU.perMsg), 100*c.brokerCPU.util, micros(c.discardCPU.perMsg), 100*c.discardCPU.util,
		micros(res.cpu.perMsg), 100*res.cpu.util, capRate, capRate/ceiling)
	if c.brokerCPU.byProcess() != "" {
		fmt.Fprintf(out, "run %d CPU per message by process: broker alone: %s; relay with discard: %s; relay through the broker: %s\n",
			run, c.brokerCPU.byProcess(), c.discardCPU.byProcess(), res.cpu.byProcess())
	}
}

// printScaling prints how --relays N did in run against one relay.
func (b *relayBench) printScaling(run int, res, one benchResult) {
	o := b.o
	scale := res.rate() / one.rate()
	b.scales = append(b.scales, scale)
	line := fmt.Sprintf("run %d scaling: %d relays / one relay = %.2f", run, o.relays, scale)
	if one.cpu.ok && res.cpu.ok && one.cpu.util > 0 {
		// At one relay's CPU per message, all cores busy would give
		// 1/util times one relay's rate, and no more.
		c := scalingCap(o.relays, one.cpu.util)
		b.scaleCaps = append(b.scaleCaps, c)
		line += fmt.Sprintf("; one relay kept the cores %.0f%% busy at %s/msg, so at that CPU per message the cores allow at most %.2f (%d relays: %.0f%% busy at %s/msg)",
			100*one.cpu.util, micros(one.cpu.perMsg), c, o.relays, 100*res.cpu.util, micros(res.cpu.perMsg))
	}
	fmt.Fprintln(b.out, line)
}

// summary prints the medians over the runs; its last line is the result.
func (b *relayBench) summary() {
	o, out, rates := b.o, b.out, b.rates
	switch {
	case len(b.ratios) > 0 && b.bb != nil:
		fmt.Fprintf(out, "median relay/min(broker baseline, relay with discard:) = %.2f\n", median(b.ratios))
		if len(b.cpuCaps) > 0 {
			fmt.Fprintf(out, "median CPU cap of that ratio, from the cores the run had = %.2f\n", median(b.cpuCaps))
		}
	case len(b.ratios) > 0:
		fmt.Fprintf(out, "median relay/baseline = %.2f\n", median(b.ratios))
	}
	if len(b.scales) > 0 {
		fmt.Fprintf(out, "median %d relays / one relay = %.2f\n", o.relays, median(b.scales))
		if len(b.scaleCaps) > 0 {
			fmt.Fprintf(out, "median CPU cap of that ratio, from the cores the run had = %.2f\n", median(b.scaleCaps))
		}
	}
	if o.runs > 1 {
		fmt.Fprintf(out, "median of %d runs: %.0f msgs/s; last run / first run = %.2f\n", o.runs, median(rates), rates[len(rates)-1]/rates[0])
	}
	if o.runs >= 6 {
		// Ageing: the table keeps every SENT row, so the last runs see
		// (runs-3)*messages rows of history that the first ones did not.
		first, last := median(rates[:3]), median(rates[len(rates)-3:])
		fmt.Fprintf(out, "ageing: median of the last 3 runs / median of the first 3 = %.0f / %.0f = %.2f, after %d messages\n",
			last, first, last/first, (o.runs-3)*o.messages)
	}
	fmt.Fprintf(out, "result msgs_per_s=%.0f p50_ms=%.2f p99_ms=%.2f\n", median(rates), median(b.p50s), median(b.p99s))
}

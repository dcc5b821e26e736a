package relaycmd

import (
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/brokers"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/outbox-go/outbox"
)

// relayProcess is what outbox relay runs: the servers of --metrics-addr and
// --admin-addr, the publishers, the database, the relays and the cleaner.
// build opens them in that order, run runs them until the context ends, and
// closers closes what build opened, the last first.
type relayProcess struct {
	o   *relayOptions
	log *slog.Logger

	tr             *tracing
	metrics, admin *httpServer
	ready          *readiness
	pubs           []outbox.Publisher
	d              *dbopen.Database
	totals         *relayTotals
	relays         []*outbox.Relay
	cleaner        *outbox.Cleaner
	closers        cli.CloseStack
}

// build opens everything the relays need, each server listening before its
// URL is logged. It returns false, with a nil error, when the end of ctx
// cut start-up short (startUpFailed).
func (p *relayProcess) build(ctx context.Context) (bool, error) {
	if err := p.startServers(ctx); err != nil {
		return false, err
	}
	if started, err := p.openPublishers(ctx); err != nil || !started {
		return false, err
	}
	if started, err := p.openDatabase(ctx); err != nil || !started {
		return false, err
	}
	if err := p.newRelays(ctx); err != nil {
		return false, err
	}
	p.ready.running(p.d.Store, p.relays)
	t := p.d.Store.Tables()
	p.log.Info("relay started", "db", p.d.Where, "table", t.Outbox, "broker", cli.RedactDSN(p.o.broker),
		"batch", p.o.batch, "max_retries", p.o.maxRetries, "retry_budget", p.o.retryBudget, "workers", p.o.workers)
	return true, nil
}

// startServers starts the tracing, then opens the listeners of
// --metrics-addr and --admin-addr and serves the health endpoints on them:
// each listens before serve logs its URL.
func (p *relayProcess) startServers(ctx context.Context) error {
	scheme, _, _ := strings.Cut(p.o.broker, ":")
	tr, err := startTracing(ctx, os.Getenv, p.log, scheme)
	if err != nil {
		return err
	}
	p.tr = tr
	p.closers.Push(tr.shutdown) // after the relays: it sends the last batches' spans
	if p.o.metricsAddr != "" {
		if p.metrics, err = listenHTTP(ctx, "metrics-addr", p.o.metricsAddr); err != nil {
			return err
		}
		p.closers.Push(p.metrics.close)
	}
	if p.o.admin.addr != "" {
		if p.admin, err = listenHTTP(ctx, "admin-addr", p.o.admin.addr); err != nil {
			return err
		}
		p.closers.Push(p.admin.close)
	}
	// The health endpoints answer from here on: /readyz says which step
	// start-up waits on.
	p.ready = newReadiness()
	for _, srv := range []*httpServer{p.metrics, p.admin} {
		if srv != nil {
			srv.serve(p.log, p.ready)
		}
	}
	return nil
}

// openPublishers opens the publishers of the workers, waiting for a broker
// that cannot be reached yet.
func (p *relayProcess) openPublishers(ctx context.Context) (bool, error) {
	o := p.o
	secrets, err := o.webhookSecrets()
	if err != nil {
		return false, err
	}
	popts := brokers.PublisherOptions{
		Source: o.source, WebhookSecrets: secrets, LegacySignature: o.webhookLegacy,
		WebhookTimeout: o.webhookTimeout, Concurrency: o.concurrency,
	}
	p.ready.setStarting("connecting to the broker")
	// Each worker publishes to a broker over a connection of its own, so
	// that one connection's window of unacknowledged messages does not cap
	// them all; the webhook's client is shared (it has a pool).
	for len(p.pubs) == 0 || brokers.IsBrokerURL(o.broker) && len(p.pubs) < o.workers {
		pub, closePub, err := openPublisherWaiting(ctx, p.log, p.ready, o.broker, popts)
		if err != nil {
			return false, startUpFailed(ctx, p.log, err)
		}
		p.closers.Push(closePub)
		p.pubs = append(p.pubs, pub)
	}
	return true, nil
}

// openDatabase opens the database with a pool for every user of it and
// checks that the tables are at the schema version the relay needs.
func (p *relayProcess) openDatabase(ctx context.Context) (bool, error) {
	o := p.o
	// Each relay may hold a claim ahead (two connections), with two to
	// spare; the admin API and the cleaner get their own on top, so that
	// neither makes a relay wait for a connection.
	conns := 2*o.workers + 2
	if o.admin.addr != "" {
		conns += adminInFlight
	}
	if o.cleanupAge > 0 || o.cleanupInbox > 0 {
		conns++
	}
	o.db.DSN = dbopen.WithPoolSize(o.db.DSN, conns)
	p.ready.setStarting("connecting to the database")
	d, err := o.db.Open(ctx, true)
	if err != nil {
		return false, startUpFailed(ctx, p.log, err)
	}
	p.d = d
	p.closers.Push(d.Close)
	if v, err := d.Store.SchemaVersion(ctx); err == nil {
		if latest, ok := dbopen.LatestVersion(d.Store); ok && v > latest {
			p.log.Warn("the outbox tables are newer than this binary; upgrade outbox", "schema_version", v, "known_version", latest)
		} else if ok && v < latest {
			return false, fmt.Errorf("the outbox tables in %s are at schema version %d and this relay needs version %d; run 'outbox migrate' with the same --db and --table first",
				d.Where, v, latest)
		}
	}
	return true, nil
}

// newRelays serves the metrics and the console on their servers and makes
// the relays and the cleaner, with the hooks that count, log, trace and
// measure their work.
func (p *relayProcess) newRelays(ctx context.Context) error {
	o, store := p.o, p.d.Store
	p.totals = &relayTotals{}
	hooks := []any{&batchLogger{log: p.log, totals: p.totals}}
	if p.tr != nil {
		hooks = append(hooks, p.tr.hook)
	}
	var cleanupHooks []any
	if p.metrics != nil {
		m, err := serveMetrics(p.metrics, store, p.log)
		if err != nil {
			return err
		}
		hooks = append(hooks, m)
		cleanupHooks = append(cleanupHooks, m)
	}
	if p.admin != nil {
		con, err := serveAdmin(p.admin, store, &o.admin, p.log)
		if err != nil {
			return err
		}
		hooks = append(hooks, con)
		runConsoleSampler(ctx, con)
	}
	p.relays = make([]*outbox.Relay, o.workers)
	for i := range p.relays {
		r, err := outbox.NewRelay(store, p.pubs[i%len(p.pubs)], outbox.RelayConfig{
			BatchSize:      o.batch,
			Interval:       o.interval,
			MinInterval:    min(o.minInterval, o.interval),
			MaxBatchSize:   min(max(o.maxBatch, o.batch), 10000),
			NoWatch:        o.noWatch,
			MaxRetries:     o.maxRetries,
			RetryBase:      o.retryBase,
			RetryMax:       o.retryMax,
			RetryBudget:    budget(o.retryBudget),
			ProbeInterval:  o.probeInterval,
			PublishTimeout: o.publishTimeout,
			StopKeyAtDead:  o.stopKeyAtDead,
			CDC:            o.cdc.on,
			SweepInterval:  o.cdc.sweep,
			Logger:         p.log,
			Hooks:          hooks,
		})
		if err != nil {
			return err
		}
		p.relays[i] = r
	}
	if o.cleanupAge > 0 || o.cleanupInbox > 0 {
		c, err := outbox.NewCleaner(store, outbox.CleanerConfig{OlderThan: o.cleanupAge, InboxOlderThan: o.cleanupInbox,
			Interval: o.cleanupEvery, DutyCycle: o.cleanupDuty, Logger: p.log, Hooks: cleanupHooks})
		if err != nil {
			return err
		}
		p.cleaner = c
	}
	return nil
}

// run runs the relays, the totals' log lines and the cleaner until ctx
// ends, then stops them in order: the relays finish and mark their batches
// in flight, the cleaner stops before the database closes, and the servers
// close before closers closes the rest.
func (p *relayProcess) run(ctx context.Context) error {
	done := make(chan struct{})
	if p.o.statsInterval > 0 {
		go p.logTotals(done)
	}
	// The cleaner stops with the relays, before the database closes.
	cleaned := make(chan struct{})
	if p.cleaner != nil {
		go func() {
			defer close(cleaned)
			_ = p.cleaner.Run(ctx) // it logs its failures and returns nil when ctx ends
		}()
	} else {
		close(cleaned)
	}
	// Each worker finishes and marks its batch in flight when ctx ends.
	errs := make(chan error, len(p.relays))
	for _, r := range p.relays {
		go func() { errs <- r.Run(ctx) }()
	}
	var err error
	for range p.relays {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	close(done)
	<-cleaned
	for _, srv := range []*httpServer{p.metrics, p.admin} {
		if srv != nil {
			srv.close()
		}
	}
	if err != nil {
		return err
	}
	p.log.Info("relay stopped", p.totals.attrs()...)
	return nil
}

// logTotals logs the totals every --stats-interval, when a batch ran since
// the last line, until done is closed.
func (p *relayProcess) logTotals(done <-chan struct{}) {
	tick := time.NewTicker(p.o.statsInterval)
	defer tick.Stop()
	var last int64 = -1
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			// An idle relay stays quiet: a line only when a batch ran
			// since the last one.
			if b := p.totals.batches.Load(); b != last {
				last = b
				p.log.Info("relay totals", p.totals.attrs()...)
			}
		}
	}
}

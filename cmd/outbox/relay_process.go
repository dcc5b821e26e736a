package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/outbox-go/outbox"
)

// errStartUpCut is what a start-up step of relayProcess.build returns when
// SIGTERM or SIGINT cut it short, once startUpFailed has logged it: the relay
// then exits 0.
var errStartUpCut = errors.New("relay: start-up cut short")

// relayProcess is what `outbox relay` runs: its servers, publishers,
// database, relays and cleaner. close releases them in the reverse order of
// their opening.
type relayProcess struct {
	o            *relayOptions
	log          *slog.Logger
	tr           *tracing
	metrics      *httpServer
	adminSrv     *httpServer
	ready        *readiness
	pubs         []outbox.Publisher
	d            *database
	totals       *relayTotals
	relays       []*outbox.Relay
	cleaner      *outbox.Cleaner
	cleanupHooks []any
	closers      []func()
}

// onClose adds fn to what close runs.
func (p *relayProcess) onClose(fn func()) { p.closers = append(p.closers, fn) }

// close runs the functions of onClose, the last added first.
func (p *relayProcess) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}

// startUpFailed is startUpFailed of the package, with errStartUpCut for a
// step that SIGTERM or SIGINT cut short.
func (p *relayProcess) startUpFailed(ctx context.Context, err error) error {
	if err := startUpFailed(ctx, p.log, err); err != nil {
		return err
	}
	return errStartUpCut
}

// build starts the tracing and the servers, then opens the publishers and
// the database, and makes the relays and the cleaner.
func (p *relayProcess) build(ctx context.Context) error {
	if err := p.startServers(ctx); err != nil {
		return err
	}
	if err := p.openPublishers(ctx); err != nil {
		return err
	}
	if err := p.openDatabase(ctx); err != nil {
		return err
	}
	if err := p.newRelays(ctx); err != nil {
		return err
	}
	p.ready.running(p.d.Store, p.relays)
	t := p.d.Store.Tables()
	o := p.o
	p.log.Info("relay started", "db", p.d.where, "table", t.Outbox, "broker", redactDSN(o.broker),
		"batch", o.batch, "max_retries", o.maxRetries, "retry_budget", o.retryBudget, "workers", o.workers)
	return p.newCleaner()
}

// startServers starts the tracing and the servers of --metrics-addr and
// --admin-addr, whose health endpoints answer from then on.
func (p *relayProcess) startServers(ctx context.Context) error {
	o, log := p.o, p.log
	scheme, _, _ := strings.Cut(o.broker, ":")
	tr, err := startTracing(ctx, os.Getenv, log, scheme)
	if err != nil {
		return err
	}
	p.tr = tr
	p.onClose(func() { tr.shutdown() }) // after the relays: it sends the last batches' spans
	if o.metricsAddr != "" {
		if p.metrics, err = listenHTTP(ctx, "metrics-addr", o.metricsAddr); err != nil {
			return err
		}
		p.onClose(p.metrics.close)
	}
	if o.admin.addr != "" {
		if p.adminSrv, err = listenHTTP(ctx, "admin-addr", o.admin.addr); err != nil {
			return err
		}
		p.onClose(p.adminSrv.close)
	}
	// The health endpoints answer from here on: /readyz says which step
	// start-up waits on.
	p.ready = newReadiness()
	for _, srv := range []*httpServer{p.metrics, p.adminSrv} {
		if srv != nil {
			srv.serve(log, p.ready)
		}
	}
	return nil
}

// openPublishers opens the publisher of each worker, waiting for a broker
// that cannot be reached yet.
func (p *relayProcess) openPublishers(ctx context.Context) error {
	o, log, ready := p.o, p.log, p.ready
	secrets, err := o.webhookSecrets()
	if err != nil {
		return err
	}
	popts := publisherOptions{
		Source: o.source, WebhookSecrets: secrets, LegacySignature: o.webhookLegacy,
		WebhookTimeout: o.webhookTimeout, Concurrency: o.concurrency,
	}
	ready.setStarting("connecting to the broker")
	pub, closePub, err := openPublisherWaiting(ctx, log, ready, o.broker, popts)
	if err != nil {
		return p.startUpFailed(ctx, err)
	}
	p.onClose(closePub)
	// Each worker publishes to a broker over a connection of its own, so
	// that one connection's window of unacknowledged messages does not cap
	// them all; the webhook's client is shared (it has a pool).
	p.pubs = []outbox.Publisher{pub}
	for isBrokerURL(o.broker) && len(p.pubs) < o.workers {
		pub, closeP, err := openPublisherWaiting(ctx, log, ready, o.broker, popts)
		if err != nil {
			return p.startUpFailed(ctx, err)
		}
		p.onClose(closeP)
		p.pubs = append(p.pubs, pub)
	}
	return nil
}

// openDatabase opens the database with a pool for every user of it, and
// checks that the tables are at the schema version this relay needs.
func (p *relayProcess) openDatabase(ctx context.Context) error {
	o, log := p.o, p.log
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
	o.db.dsn = withPoolSize(o.db.dsn, conns)
	p.ready.setStarting("connecting to the database")
	d, err := o.db.open(ctx, true)
	if err != nil {
		return p.startUpFailed(ctx, err)
	}
	p.d = d
	p.onClose(func() { d.Close() })
	if v, err := d.Store.SchemaVersion(ctx); err == nil {
		if latest, ok := latestVersion(d.Store); ok && v > latest {
			log.Warn("the outbox tables are newer than this binary; upgrade outbox", "schema_version", v, "known_version", latest)
		} else if ok && v < latest {
			return fmt.Errorf("the outbox tables in %s are at schema version %d and this relay needs version %d; run 'outbox migrate' with the same --db and --table first",
				d.where, v, latest)
		}
	}
	return nil
}

// newRelays makes the relays of --workers, with the hooks of the batch log,
// the tracing, the metrics and the console.
func (p *relayProcess) newRelays(ctx context.Context) error {
	o, log := p.o, p.log
	p.totals = &relayTotals{}
	hooks := []any{&batchLogger{log: log, totals: p.totals}}
	if p.tr != nil {
		hooks = append(hooks, p.tr.hook)
	}
	if p.metrics != nil {
		m, err := serveMetrics(p.metrics, p.d.Store, log)
		if err != nil {
			return err
		}
		hooks = append(hooks, m)
		p.cleanupHooks = append(p.cleanupHooks, m)
	}
	if p.adminSrv != nil {
		con, err := serveAdmin(p.adminSrv, p.d.Store, &o.admin, log)
		if err != nil {
			return err
		}
		hooks = append(hooks, con)
		runConsoleSampler(ctx, con)
	}
	p.relays = make([]*outbox.Relay, o.workers)
	for i := range p.relays {
		r, err := outbox.NewRelay(p.d.Store, p.pubs[i%len(p.pubs)], outbox.RelayConfig{
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
			Logger:         log,
			Hooks:          hooks,
		})
		if err != nil {
			return err
		}
		p.relays[i] = r
	}
	return nil
}

// newCleaner makes the cleaner of the cleanup flags, if any is set.
func (p *relayProcess) newCleaner() error {
	o := p.o
	if o.cleanupAge > 0 || o.cleanupInbox > 0 {
		c, err := outbox.NewCleaner(p.d.Store, outbox.CleanerConfig{OlderThan: o.cleanupAge, InboxOlderThan: o.cleanupInbox,
			Interval: o.cleanupEvery, Logger: p.log, Hooks: p.cleanupHooks})
		if err != nil {
			return err
		}
		p.cleaner = c
	}
	return nil
}

// run runs the relays, the stats log and the cleaner until ctx ends, then
// stops the servers and logs the totals.
func (p *relayProcess) run(ctx context.Context) error {
	log := p.log
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
	var err error
	errs := make(chan error, len(p.relays))
	for _, r := range p.relays {
		go func() { errs <- r.Run(ctx) }()
	}
	for range p.relays {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	close(done)
	<-cleaned
	for _, srv := range []*httpServer{p.metrics, p.adminSrv} {
		if srv != nil {
			srv.close()
		}
	}
	if err != nil {
		return err
	}
	log.Info("relay stopped", p.totals.attrs()...)
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
			// An idle relay stays quiet: a line only when a
			// batch ran since the last one.
			if b := p.totals.batches.Load(); b != last {
				last = b
				p.log.Info("relay totals", p.totals.attrs()...)
			}
		}
	}
}

//go:build chaos

package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/brokertest"
)

// The chaos run is not part of `make test`: `make chaos` builds it with the
// chaos tag and runs it for CHAOS_DURATION.
var (
	chaosDuration   = flag.Duration("chaos.duration", 2*time.Minute, "how long producers write and the chaos lasts, before the final drain and check")
	chaosRelays     = flag.Int("chaos.relays", 3, "relay processes running at once")
	chaosDB         = flag.String("chaos.db", "postgres", "the producers' database and the relays': postgres, mysql (MariaDB) or sqlite")
	chaosOutage     = flag.Duration("chaos.outage", 30*time.Second, "how long the broker stays down, once in the run: longer than the short-window relays' retries and their --retry-budget")
	chaosDBDown     = flag.Duration("chaos.dbdown", 0, "how long the consumer's database stays away, once in the run (0: a third of the run, at most a minute)")
	chaosLogs       = flag.String("chaos.logs", "", "keep the relays' logs in this folder (created if missing) instead of a temporary one")
	chaosBrokerName = flag.String("chaos.broker", "nats", "the broker, a private instance: nats (SIGKILLed), amqp (a RabbitMQ node), redis (fsync always) or mqtt (mosquitto with persistence), the last three restarted")
)

// TestChaos runs the whole path for a while with real processes and kills
// them: producers commit (and roll back) business transactions on
// PostgreSQL; several `outbox relay` processes publish to a private
// nats-server; a subscriber applies each message through the inbox to a
// second database. Meanwhile, at random: a relay is SIGKILLed (mid-batch or
// not) and started again, a relay is stopped with SIGTERM (it must exit 0),
// the broker is SIGKILLed and started again, the subscriber is stopped and
// started again, or crashed in the middle of a handler (its connections to
// the broker, which go through a proxy, are cut at once; its handlers die
// or finish and commit; it is abandoned and a new one takes over),
// delivered messages are published again. At the end every
// relay drains the table and the test checks the seeds' promise: every
// committed message has exactly one effect, no rolled-back one has any, and
// no row is left unsent.
func TestChaos(t *testing.T) {
	bin := outboxBinary(t)
	cb := newChaosBroker(t, *chaosBrokerName)
	ctx, cancel := context.WithTimeout(context.Background(), *chaosDuration+15*time.Minute)
	defer cancel()
	h, st := newChaosStore(ctx, t, cb.Broker, *chaosDB)
	logs := t.TempDir()
	if *chaosLogs != "" {
		if err := os.MkdirAll(*chaosLogs, 0o755); err != nil {
			t.Fatal(err)
		}
		logs = *chaosLogs
	}
	r := &chaosRun{t: t, ctx: ctx, bin: bin, cb: cb, h: h, st: st, logs: logs,
		rnd:      rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)), //nolint:gosec // chaos, not secrets
		consumer: useProxiedConsumer(ctx, t, h), order: newKeyOrder(), dbOutage: consumerOutage()}
	r.dieFirst = r.rnd.IntN(2) // the handlers die in every other crash
	t.Logf("chaos on %s for %s: %d relay processes (the odd ones with %v, the others with the default retry settings), %s; the broker down once for %s; the consumer's database away once for %s",
		*chaosDB, *chaosDuration, *chaosRelays, shortRetryWindow, cb.what, *chaosOutage, r.dbOutage)

	// The subscriber: stopped and started again by the chaos, or crashed in
	// the middle of a handler and abandoned (crashed: each one's Run
	// returned or given up on).
	r.sub = r.startSub()
	defer func() { r.sub.stop(t) }()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var waitWatcher func([]string)
	r.watcher, waitWatcher = r.order.watch(watchCtx, t, cb)
	defer func() {
		for _, gone := range r.crashed {
			<-gone
		}
	}()

	// The relays: real processes.
	r.relays = make([]*relayProc, *chaosRelays)
	for i := range r.relays {
		r.relays[i] = startRelay(t, bin, st.relayDSN, cb.url, filepath.Join(r.logs, fmt.Sprintf("relay-%d.log", i)), shortWindow(i))
	}
	defer func() {
		for _, p := range r.relays {
			p.kill()
		}
	}()

	// The producers write until the chaos ends.
	prodCtx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	var prodWG sync.WaitGroup
	var produced, late atomic.Int64
	for p := range producers {
		prodWG.Go(func() { r.produce(prodCtx, fmt.Sprintf("chaos-tx-%d", p), st.tx, "", &produced) })
	}
	if st.lateTx != nil {
		for p := range 2 {
			prodWG.Go(func() {
				r.produce(prodCtx, fmt.Sprintf("chaos-late-%d", p), st.lateTx, fmt.Sprintf("late-%d", p), &late)
			})
		}
	}

	// The chaos: the faults the run must cover at fixed points, random
	// ones all along. It lasts chaosDuration, or longer until every step
	// has run (on a loaded host the steps may slip): the producers write
	// until it ends, so that every step meets messages on their way.
	start := time.Now()
	steps := r.schedule(start)
	for (time.Since(start) < *chaosDuration || len(steps) > 0) && ctx.Err() == nil {
		sleepCtx(ctx, time.Duration(300+r.rnd.IntN(1200))*time.Millisecond)
		r.randomFault(ctx)
		steps = r.due(steps, time.Now())
	}
	r.elapsed = time.Since(start)
	stopProducers()
	prodWG.Wait()
	committed := h.committedIDs()
	r.logFaults(produced.Load()+late.Load(), len(committed))
	h.cleaned = r.cleaned
	if st.lateTx != nil {
		t.Logf("chaos: %d of those held their outbox row's id for 0.1-3 s before committing or rolling back", late.Load())
	}

	r.check(committed, waitWatcher)
}

// consumerOutage is how long the consumer's database stays away:
// -chaos.dbdown, or a third of the run up to a minute.
func consumerOutage() time.Duration {
	if *chaosDBDown > 0 {
		return *chaosDBDown
	}
	return min(time.Minute, *chaosDuration/3)
}

// chaosRun is the state of one chaos run.
type chaosRun struct {
	t        *testing.T
	ctx      context.Context
	bin      string
	cb       *chaosBroker
	h        *harness
	st       *chaosStore
	logs     string
	rnd      *rand.Rand
	consumer *chaosConsumerDB
	order    *keyOrder
	dbOutage time.Duration
	elapsed  time.Duration // how long the chaos lasted

	relays  []*relayProc
	sub     *chaosSub
	watcher brokertest.Subscriber // the order watcher's
	crashed []chan struct{}

	// What happened, for the log and the coverage checks.
	kills, terms, freezes, longFreezes, dbDrops, brokerKills, subRestarts, dupRounds, cleanups int
	refusals, refusalsMet                                                                      int
	refusalMet                                                                                 int // the most marks of a refusal seen (rows and log lines)
	cleaned                                                                                    int64
	subCrashes                                                                                 []subCrash
	idleCrashes                                                                                int // crashes called off: no message came
	dieFirst                                                                                   int // the handlers die in every other crash, from this one
	outages, outageMet                                                                         int
	lastBrokerKill                                                                             time.Time
	dbOutages                                                                                  int
}

// A chaosStep is a fault the run must cover: it runs once the run is past
// at, after the steps before it, while messages flow.
type chaosStep struct {
	at   time.Time
	what string
	run  func()
}

// schedule places the faults the run must cover at fixed fractions of the
// run from start: two subscriber crashes (one in which the handlers die,
// one in which they finish), the refusal spell, the consumer's database
// outage, the broker's outage, the round of duplicates. Each waits for
// messages to flow and is tried until it happened, so that coverage never
// depends on chance; the random faults go on around them.
func (r *chaosRun) schedule(start time.Time) []chaosStep {
	at := func(f float64) time.Time { return start.Add(time.Duration(f * float64(*chaosDuration))) }
	crash := func() {
		for range 4 {
			if r.crashSub(15 * time.Second) {
				return
			}
		}
	}
	return []chaosStep{
		{at(0.10), "a subscriber crash", crash},
		{at(0.15), "the refusal spell", func() { r.refuse(45 * time.Second) }},
		{at(0.20), "a second subscriber crash", crash},
		{at(0.25), "the consumer's database outage", func() {
			r.consumer.outage(r.ctx, r.t, r.h, r.dbOutage)
			r.dbOutages++
		}},
		{at(0.40), "the broker's outage", r.brokerOutage},
		{at(0.50), "the round of duplicates", func() {
			chaosDuplicates(r.ctx, r.t, r.cb.Broker, r.h)
			r.dupRounds++
		}},
	}
}

// due runs the first of steps if now is past its time, and returns the
// steps left.
func (r *chaosRun) due(steps []chaosStep, now time.Time) []chaosStep {
	if len(steps) == 0 || !now.After(steps[0].at) {
		return steps
	}
	r.waitFlow(steps[0].what)
	steps[0].run()
	return steps[1:]
}

// waitFlow waits, up to 90 s, until a new effect arrives.
func (r *chaosRun) waitFlow(what string) {
	before, start := r.h.countEffects(r.ctx, r.t), time.Now()
	for time.Since(start) < 90*time.Second && r.ctx.Err() == nil {
		if r.h.countEffects(r.ctx, r.t) > before {
			return
		}
		sleepCtx(r.ctx, 100*time.Millisecond)
	}
	r.t.Logf("chaos: no new effect for 90s before %s", what)
}

// randomFault makes one fault at random, or none.
func (r *chaosRun) randomFault(ctx context.Context) {
	t, rnd := r.t, r.rnd
	i := rnd.IntN(len(r.relays))
	restart := func() { r.relays[i] = startRelay(t, r.bin, r.st.relayDSN, r.cb.url, r.relays[i].log, shortWindow(i)) }
	switch a := rnd.IntN(100); {
	case a < 30: // a relay dies, wherever it is in its batch
		r.relays[i].kill()
		sleepCtx(ctx, time.Duration(rnd.IntN(300))*time.Millisecond)
		restart()
		r.kills++
	case a < 45: // a relay is told to stop: it finishes its batch and exits 0
		if err := r.relays[i].term(30 * time.Second); err != nil {
			t.Errorf("relay stopped with SIGTERM: %v (log %s)", err, r.relays[i].log)
		}
		restart()
		r.terms++
	case a < 55: // a relay freezes (a long pause, a stalled VM) holding its claim
		d := time.Duration(500+rnd.IntN(2500)) * time.Millisecond
		if r.freezes%4 == 0 { // the first and every fourth: past its lease (SQLite)
			d = relayLease + time.Duration(1000+rnd.IntN(2000))*time.Millisecond
			r.longFreezes++
		}
		r.relays[i].freeze(d)
		r.freezes++
	case a < 65 && r.st.dropRelayConns != nil: // the database drops the relays' connections
		n, err := r.st.dropRelayConns(ctx)
		if err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		r.dbDrops += n
	case a < 70: // an operator deletes old SENT rows while everything runs
		n, err := cleanup(r.ctx, r.bin, r.st.relayDSN)
		if err != nil {
			t.Fatalf("outbox cleanup: %v", err)
		}
		r.cleaned += n
		r.cleanups++
	case a < 75: // the subscriber goes away and comes back
		r.sub.stop(t)
		r.sub = r.startSub()
		r.subRestarts++
	case a < 85 && time.Since(r.lastBrokerKill) > r.cb.restartGap: // the broker goes down and comes back
		r.cb.restart(t)
		r.lastBrokerKill = time.Now()
		r.brokerKills++
	case a >= 85 && a < 95: // the subscriber crashes in the middle of a handler
		r.crashSub(5 * time.Second)
	case a >= 95: // the broker refuses every publish for a while
		r.refuse(10 * time.Second)
	}
}

func (r *chaosRun) startSub() *chaosSub {
	return startChaosSubscriber(r.ctx, r.t, r.cb, r.h, r)
}

// crashSub crashes the subscriber in the middle of a handler, if one comes
// within wait, and starts a new one.
func (r *chaosRun) crashSub(wait time.Duration) bool {
	where := int32(holdAtStart)
	if r.rnd.IntN(3) > 0 {
		where = holdBeforeCommit
	}
	sc, ok := r.sub.crash(where, (len(r.subCrashes)+r.dieFirst)%2 == 0, wait)
	if !ok {
		r.idleCrashes++
		return false
	}
	r.crashed = append(r.crashed, r.sub.abandon(r.t, time.Duration(500+r.rnd.IntN(2500))*time.Millisecond))
	r.sub = r.startSub()
	r.subCrashes = append(r.subCrashes, sc)
	return true
}

// refuse has the broker refuse every publish for 0.5-2 s, or longer, up to
// wait, until a relay has met the refusal (the relays may be pausing after
// a broker restart). A relay that met it charged some rows, whose last
// error names it, or took it for an outage and logged it.
func (r *chaosRun) refuse(wait time.Duration) {
	count := func() int {
		n, err := r.h.countLastError(r.ctx, r.cb.refusal.like)
		if err != nil {
			r.t.Fatalf("counting the rows the refusal met: %v", err)
		}
		return n + logMentions(r.t, r.logs, strings.Trim(r.cb.refusal.like, "%"))
	}
	before := count()
	restore := r.cb.refusal.start(r.t, r.sub.s, r.watcher)
	sleepCtx(r.ctx, time.Duration(500+r.rnd.IntN(1500))*time.Millisecond)
	n := count()
	for deadline := time.Now().Add(wait); n <= before && time.Now().Before(deadline); n = count() {
		sleepCtx(r.ctx, 200*time.Millisecond)
	}
	restore()
	r.refusals++
	if n > before {
		r.refusalsMet++
	}
	r.refusalMet = max(r.refusalMet, n)
}

// brokerOutage stops the broker for chaosOutage.
func (r *chaosRun) brokerOutage() {
	r.t.Logf("chaos: the broker goes down for %s", *chaosOutage)
	r.cb.down(r.t)
	sleepCtx(r.ctx, *chaosOutage)
	n, err := r.h.countOutbox(r.ctx, true)
	if err != nil {
		r.t.Fatalf("counting the rows not sent at the outage's end: %v", err)
	}
	r.outageMet = n
	r.cb.up(r.t)
	r.outages++
	r.lastBrokerKill = time.Now()
}

// produce commits business transactions through tx until ctx ends (see
// chaosProduce) and records each committed message's outbox id.
func (r *chaosRun) produce(ctx context.Context, prefix string, tx txFunc, key string, produced *atomic.Int64) {
	chaosProduce(ctx, r.t, r.h, prefix, tx, key, produced, func(msgID string) {
		id, ok, err := r.st.outboxID(context.WithoutCancel(ctx), msgID)
		if err != nil {
			r.t.Errorf("reading the outbox id of %s: %v", msgID, err)
		} else if ok {
			r.order.committed(msgID, id)
		}
	})
}

func (r *chaosRun) logFaults(transactions int64, committed int) {
	t := r.t
	t.Logf("chaos over after %s: %d transactions (%d committed); relays: %d SIGKILLs, %d SIGTERMs, %d freezes (%d past the claim's lease), %d database connections dropped; %d broker restarts, %d subscriber restarts; %d cleanups deleted %d SENT rows",
		r.elapsed.Round(time.Second), transactions, committed, r.kills, r.terms, r.freezes, r.longFreezes, r.dbDrops, r.brokerKills, r.subRestarts, r.cleanups, r.cleaned)
	logSubCrashes(t, r.subCrashes, r.idleCrashes)
	t.Logf("chaos: the broker refused every publish %d times for 0.5 s or more (%s); the relays met %d of them: at most %d rows with it as their last error and relay log lines naming it",
		r.refusals, r.cb.refusal.what, r.refusalsMet, r.refusalMet)
	t.Logf("chaos: the broker was down %d time for %s; %d rows were not sent at its end", r.outages, *chaosOutage, r.outageMet)
}

// checkCoverage fails the run when a fault it must cover did not happen.
func (r *chaosRun) checkCoverage() {
	t := r.t
	if r.outageMet == 0 {
		t.Errorf("no row was waiting at the end of the broker's %s outage, so the outage was not tested", *chaosOutage)
	}
	if r.dbOutages == 0 {
		t.Errorf("the consumer's database never went away")
	}
	if *chaosDuration < 30*time.Second {
		return
	}
	if r.refusalsMet == 0 {
		t.Errorf("the broker refused every publish %d times, yet no row had that refusal (%s) as its last error and no relay logged it: the relays never met it, so it was not tested", r.refusals, r.cb.refusal.like)
	}
	died := 0
	for _, c := range r.subCrashes {
		if c.die {
			died++
		}
	}
	if died == 0 || died == len(r.subCrashes) {
		t.Errorf("the subscriber crashed %d times in the middle of a handler, %d of them with the handlers dying: not both ways (handlers dying, and finishing), so that check was not made", len(r.subCrashes), died)
	}
}

// logMentions counts the lines of the relays' logs in dir that contain s.
func logMentions(t *testing.T, dir, s string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "relay-*.log"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("reading %s: %v", f, err)
		}
		n += strings.Count(string(b), s)
	}
	return n
}

// logSubCrashes says how the subscriber's crashes went.
func logSubCrashes(t *testing.T, crashes []subCrash, idle int) {
	t.Helper()
	var beforeCommit, died int
	var heldDied, heldLived []string
	for _, c := range crashes {
		if c.beforeCommit {
			beforeCommit++
		}
		if c.die {
			died++
			heldDied = append(heldDied, c.msgID)
		} else {
			heldLived = append(heldLived, c.msgID)
		}
	}
	t.Logf("chaos: %d subscriber kills in the middle of a handler (%d just before the inbox's commit, %d at the handler's start; %d with the handlers dying, %d with the handlers finishing after the network was cut; %d called off, no message within 5s); the held messages, died %v, finished %v",
		len(crashes), beforeCommit, len(crashes)-beforeCommit, died, len(crashes)-died, idle, heldDied, heldLived)
}

// cleanup runs `outbox cleanup` for SENT rows older than a second and
// returns how many it deleted.
func cleanup(ctx context.Context, bin, dsn string) (int64, error) {
	out, err := exec.CommandContext(ctx, bin, "cleanup", "--db", dsn, "--older-than", "1s", "--batch", "500").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%w: %s", err, out)
	}
	var n int64
	if _, err := fmt.Sscanf(string(out), "deleted %d ", &n); err != nil {
		return 0, fmt.Errorf("reading %q: %w", out, err)
	}
	return n, nil
}

// outboxBinary is the outbox command: OUTBOX_BIN, or built from this
// workspace.
func outboxBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("OUTBOX_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "outbox")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/outbox-go/outbox/cmd/outbox").CombinedOutput()
	if err != nil {
		t.Fatalf("building the outbox command (or set OUTBOX_BIN): %v\n%s", err, out)
	}
	return bin
}

// relayProc is one `outbox relay` process.
type relayProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // after done
	log  string
}

// shortRetryWindow is the retry settings of every other relay of the run: a
// message's retries are over within seconds and its budget within 20 s, so
// that the run's outage (chaos.outage) outlasts them all, as a day-long
// outage would outlast the defaults. The other relays run with the
// defaults.
var shortRetryWindow = []string{"--retry-base", "100ms", "--retry-max", "1s", "--max-retries", "5", "--retry-budget", "20s"}

// shortWindow reports whether relay i runs with shortRetryWindow.
func shortWindow(i int) bool { return i%2 == 1 }

func startRelay(t *testing.T, bin, dsn, url, log string, short bool) *relayProc {
	t.Helper()
	f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintf(f, "--- start %s\n", time.Now().Format(time.RFC3339Nano))
	args := []string{"relay", "--db", dsn, "--broker", url, "--batch", "50", "--interval", "50ms",
		"--publish-timeout", (relayLease / 2).String(), "--stats-interval", "0", "--log-level", "warn"}
	if short {
		args = append(args, shortRetryWindow...)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s relay: %v", bin, err)
	}
	r := &relayProc{cmd: cmd, done: make(chan struct{}), log: log}
	go func() { r.err = cmd.Wait(); close(r.done) }()
	return r
}

// kill SIGKILLs the relay, as in a crash.
func (r *relayProc) kill() {
	_ = r.cmd.Process.Kill()
	<-r.done
}

// freeze stops the relay (SIGSTOP) for d, then lets it go on.
func (r *relayProc) freeze(d time.Duration) {
	if r.cmd.Process.Signal(syscall.SIGSTOP) != nil {
		return
	}
	time.Sleep(d)
	_ = r.cmd.Process.Signal(syscall.SIGCONT)
}

// term sends SIGTERM and waits for a clean exit.
func (r *relayProc) term(wait time.Duration) error {
	select {
	case <-r.done:
		return fmt.Errorf("it had already exited: %v", r.err)
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
		return r.err // nil for exit status 0
	case <-time.After(wait):
		r.kill()
		return fmt.Errorf("it did not exit within %s of SIGTERM", wait)
	}
}

// chaosSub is a running subscriber. It reaches the broker through a proxy
// of its own, which crash cuts.
type chaosSub struct {
	s      brokertest.Subscriber
	proxy  *tcpProxy
	cancel context.CancelFunc // Run's context
	done   chan error
	// hctx is the handlers' context (on top of the one Run gives them):
	// canceled by a crash in which the handlers die with the process.
	hctx    context.Context
	hcancel context.CancelFunc

	// A crash arms hold (holdAtStart or holdBeforeCommit); the first
	// handler to get there takes it (holdTaken), closes inside with its
	// msg_id in held, and waits for release.
	hold    atomic.Int32
	inside  chan struct{}
	release chan struct{}
	held    string
}

const (
	holdNone = iota
	holdAtStart
	holdBeforeCommit
	holdTaken
)

func startChaosSubscriber(ctx context.Context, t *testing.T, cb *chaosBroker, h *harness, r *chaosRun) *chaosSub {
	t.Helper()
	proxy := startProxy(t, cb.addr)
	// A message failing for half the consumer's database outage (and 5
	// times) is dead-lettered: a subscriber that counted the outage's
	// failures would lose messages.
	dla := max(5*time.Second, r.dbOutage/2)
	s := cb.via(proxy.addr(), "dead_letter_after="+dla.String()).NewSubscriber(t, group)
	sctx, cancel := context.WithCancel(ctx)
	hctx, hcancel := context.WithCancel(context.Background())
	c := &chaosSub{s: s, proxy: proxy, cancel: cancel, done: make(chan error, 1), hctx: hctx, hcancel: hcancel,
		inside: make(chan struct{}), release: make(chan struct{})}
	inner := h.handler()
	handler := func(ctx context.Context, m outbox.Message) error {
		r.order.delivered(&r.order.sub, m)
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		defer context.AfterFunc(c.hctx, stop)()
		if c.hold.CompareAndSwap(holdAtStart, holdTaken) {
			c.wait(m.MsgID)
		}
		ctx = context.WithValue(ctx, beforeCommitKey{}, func() {
			if c.hold.CompareAndSwap(holdBeforeCommit, holdTaken) {
				c.wait(m.MsgID)
			}
		})
		err := inner(ctx, m)
		r.consumer.handled(m.MsgID, err)
		return err
	}
	go func() { c.done <- s.Run(sctx, handler) }()
	return c
}

// wait holds the handler of msgID until the crash has happened.
func (c *chaosSub) wait(msgID string) {
	c.held = msgID
	close(c.inside)
	select {
	case <-c.release:
	case <-time.After(30 * time.Second): // the test gave up
	}
}

func (c *chaosSub) stop(t *testing.T) {
	t.Helper()
	switch returned, err := c.endRun(); {
	case !returned:
		t.Errorf("subscriber did not stop within 30s")
	case err != nil:
		t.Errorf("subscriber: %v", err)
	}
	c.closeSub()
	c.proxy.close()
}

// endRun ends Run's context and waits up to 30s for Run to return; err is
// what Run returned, nil for context.Canceled.
func (c *chaosSub) endRun() (returned bool, err error) {
	c.cancel()
	select {
	case err := <-c.done:
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		return true, err
	case <-time.After(30 * time.Second):
		return false, nil
	}
}

// closeSub closes the subscriber, when it has a Close, and ends its
// handlers' context.
func (c *chaosSub) closeSub() {
	if cl, ok := c.s.(interface{ Close() error }); ok {
		_ = cl.Close()
	}
	c.hcancel()
}

// subCrash is how one crash of the subscriber went.
type subCrash struct {
	beforeCommit bool   // the handler was held just before its commit, not at its start
	die          bool   // the handlers died with the network, rather than finish
	msgID        string // the held handler's message
}

// crash crashes the subscriber in the middle of a handler: it waits up to
// wait for a handler to be held (where), then cuts the subscriber's network
// at once, and the proxy refuses the subscriber's reconnections from then
// on. When die, the handlers' context is canceled, as for a process that
// died, and the held one does not commit; otherwise it goes on and commits,
// as a process that lost its network and not its database would, and the
// subscriber's ack cannot reach the broker. ok is false when no handler
// came within wait: nothing happened. The crashed subscriber is left to
// abandon.
func (c *chaosSub) crash(where int32, die bool, wait time.Duration) (sc subCrash, ok bool) {
	c.hold.Store(where)
	select {
	case <-c.inside:
	case <-time.After(wait):
		if c.hold.CompareAndSwap(where, holdNone) {
			return subCrash{}, false
		}
		<-c.inside // taken meanwhile
	}
	c.proxy.kill()
	if die {
		c.hcancel()
	}
	close(c.release)
	return subCrash{beforeCommit: where == holdBeforeCommit, die: die, msgID: c.held}, true
}

// abandon lets a crashed subscriber's Run go: after a while, as the rest of
// a process goes down some time after its network, its context ends; Run
// is given 30s to return. gone is closed when Run returned or the 30s are
// over; until then the proxy refuses the subscriber's reconnections.
func (c *chaosSub) abandon(t *testing.T, after time.Duration) (gone chan struct{}) {
	gone = make(chan struct{})
	go func() {
		defer close(gone)
		time.Sleep(after)
		returned, err := c.endRun()
		if !returned {
			t.Errorf("a crashed subscriber's Run did not return within 30s of its context's end")
			return
		}
		if err != nil {
			t.Logf("crashed subscriber's Run: %v", err)
		}
		c.closeSub()
	}()
	return gone
}

// chaosProduce commits business transactions through tx until ctx ends,
// with msg_ids prefix-000000, prefix-000001, ...; every tenth rolls back
// after writing its message. Three messages in four have a key: the
// account they debit (writers of one account serialize on its row, so
// their ids follow their commits), or lateKey where set (a key of this
// producer's own, for transactions that take their id before the account's
// lock); the rest have none. committed gets the msg_id of each commit.
func chaosProduce(ctx context.Context, t *testing.T, h *harness, prefix string, tx txFunc, lateKey string, produced *atomic.Int64, committed func(msgID string)) {
	for i := 0; ctx.Err() == nil; i++ {
		id := fmt.Sprintf("%s-%06d", prefix, i)
		// Every tenth rolls back: the shift gives each account commits.
		acct := fmt.Sprintf("acct-%d", (i+i/chaosAccounts)%chaosAccounts)
		amount := i%100 + 1
		key := acct
		switch {
		case i%4 == 3:
			key = ""
		case lateKey != "":
			key = lateKey
		}
		m := outbox.Message{MsgID: id, Topic: h.b.Topic, Key: key, Payload: []byte(fmt.Sprintf(`{"account":%q,"amount":%d}`, acct, amount))}
		err := tx(ctx, m, acct, amount, i%10 == 9)
		if err != nil && ctx.Err() != nil {
			err = errRollback // ended mid-transaction: it rolled back, or failed before
		}
		if err := h.record(id, transfer{Account: acct, Amount: amount}, err); err != nil {
			t.Errorf("business transaction %s: %v", id, err)
			return
		}
		if err == nil {
			committed(id)
		}
		produced.Add(1)
		time.Sleep(time.Duration(rand.IntN(4)) * time.Millisecond) //nolint:gosec // pacing
	}
}

// chaosDuplicates publishes delivered messages again, retrying while the
// broker may be restarting.
func chaosDuplicates(ctx context.Context, t *testing.T, b Broker, h *harness) {
	t.Helper()
	h.mu.Lock()
	dups := append([]outbox.Message(nil), h.sent...)
	h.mu.Unlock()
	pub := b.NewPublisher(t)
	defer closeIfCloser(pub)
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		errs := pub.Publish(pctx, dups)
		cancel()
		if errs == nil {
			t.Logf("chaos: published %d delivered messages again", len(dups))
			return
		}
		if attempt == 5 {
			t.Fatalf("publishing duplicates: %v", errors.Join(errs...))
		}
		time.Sleep(time.Second)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func lastLines(b []byte, n int) string {
	lines := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			lines++
			if lines > n {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

// explainLost logs what became of messages without an effect: the
// consumer's handler calls and last error, whether the watcher group got
// them, and their outbox row.
func (r *chaosRun) explainLost(lost []string) {
	for _, id := range lost[:min(10, len(lost))] {
		calls, last := r.consumer.history(id)
		r.order.mu.Lock()
		watched := r.order.watcher.seen[id]
		r.order.mu.Unlock()
		status, lastErr, err := r.st.row(r.ctx, id)
		r.t.Logf("lost %s: %d handler calls in the consumer group (last error %v); the watcher group got it: %v; outbox row: status %s, last_error %q %v",
			id, calls, last, watched, status, lastErr, err)
	}
}

// check waits until every relay has drained the table and every effect
// has arrived, stops the relays, and makes the run's checks: effects,
// per-key order, the consumer's outage, DEAD rows, coverage.
func (r *chaosRun) check(committed []string, waitWatcher func([]string)) {
	t, h, ctx := r.t, r.h, r.ctx
	// Every relay drains the table; every effect arrives.
	h.waitOutboxDrained(ctx, t)
	if err := h.awaitEffects(ctx, len(committed), "every committed message's effect"); err != nil {
		t.Error(err) // the checks below say which are missing, and what became of them
	}
	time.Sleep(2 * time.Second) // stray redeliveries
	for _, p := range r.relays {
		if err := p.term(30 * time.Second); err != nil {
			t.Errorf("relay stopped with SIGTERM at the end: %v (log %s)", err, p.log)
		}
	}
	// The crashed subscribers' handlers have finished, or been given up on.
	for _, gone := range r.crashed {
		<-gone
	}
	lost := h.check(t, committed)
	waitWatcher(committed)
	r.explainLost(lost)
	r.order.check(ctx, t, r.cb)
	r.consumer.report(t, r.dbOutage)
	dead, err := h.countDead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("chaos: %d DEAD rows", dead)
	if dead > 0 {
		t.Errorf("%d rows are DEAD: no message may die of the chaos (outages, refusals, restarts)", dead)
	}
	r.checkCoverage()
	// What the relays logged (warnings and errors: the chaos causes many).
	for _, p := range r.relays {
		if b, err := os.ReadFile(p.log); err == nil {
			n := 10
			if t.Failed() {
				n = 40
			}
			t.Logf("%s, last lines:\n%s", filepath.Base(p.log), lastLines(b, n))
		}
	}
}

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
	url, b := cb.url, cb.Broker
	ctx, cancel := context.WithTimeout(context.Background(), *chaosDuration+6*time.Minute)
	defer cancel()
	h, st := newChaosStore(ctx, t, b, *chaosDB)
	dsn := st.relayDSN
	logs := t.TempDir()
	t.Logf("chaos on %s for %s: %d relay processes (the odd ones with %v, the others with the default retry settings), %s; the broker down once for %s",
		*chaosDB, *chaosDuration, *chaosRelays, shortRetryWindow, cb.what, *chaosOutage)

	// The subscriber: stopped and started again by the chaos, or crashed in
	// the middle of a handler and abandoned (crashed: each one's Run
	// returned or given up on).
	sub := startChaosSubscriber(ctx, t, cb, h)
	defer func() { sub.stop(t) }()
	var crashed []chan struct{}
	defer func() {
		for _, gone := range crashed {
			<-gone
		}
	}()

	// The relays: real processes.
	relays := make([]*relayProc, *chaosRelays)
	for i := range relays {
		relays[i] = startRelay(t, bin, dsn, url, filepath.Join(logs, fmt.Sprintf("relay-%d.log", i)), shortWindow(i))
	}
	defer func() {
		for _, r := range relays {
			r.kill()
		}
	}()

	// The producers write until the chaos ends.
	prodCtx, stopProducers := context.WithTimeout(ctx, *chaosDuration)
	defer stopProducers()
	var prodWG sync.WaitGroup
	var produced atomic.Int64
	for p := range producers {
		prodWG.Go(func() { chaosProduce(prodCtx, t, h, fmt.Sprintf("chaos-tx-%d", p), st.tx, &produced) })
	}
	var late atomic.Int64
	if st.lateTx != nil {
		for p := range 2 {
			prodWG.Go(func() { chaosProduce(prodCtx, t, h, fmt.Sprintf("chaos-late-%d", p), st.lateTx, &late) })
		}
	}

	// The chaos.
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)) //nolint:gosec // chaos, not secrets
	var kills, terms, freezes, longFreezes, dbDrops, brokerKills, subRestarts, dupRounds, cleanups, refusals int
	refusalMet := 0 // the most marks of a refusal seen (rows and log lines)
	var cleaned int64
	var subCrashes []subCrash
	var idleCrashes int     // crashes called off: no message came
	dieFirst := rnd.IntN(2) // the handlers die in every other crash
	crashSub := func() {
		where := int32(holdAtStart)
		if rnd.IntN(3) > 0 {
			where = holdBeforeCommit
		}
		sc, ok := sub.crash(where, (len(subCrashes)+dieFirst)%2 == 0, 5*time.Second)
		if !ok {
			idleCrashes++
			return
		}
		crashed = append(crashed, sub.abandon(t, time.Duration(500+rnd.IntN(2500))*time.Millisecond))
		sub = startChaosSubscriber(ctx, t, cb, h)
		subCrashes = append(subCrashes, sc)
	}
	// refuse has the broker refuse every publish for 0.5-2 s, or longer, up
	// to 10 s, until a relay has met the refusal (the relays may be pausing
	// after a broker restart). A relay that met it charged some rows, whose
	// last error names it, or took it for an outage and logged it.
	refuse := func() {
		count := func() int {
			n, err := h.countLastError(ctx, cb.refusal.like)
			if err != nil {
				t.Fatalf("counting the rows the refusal met: %v", err)
			}
			return n + logMentions(t, logs, strings.Trim(cb.refusal.like, "%"))
		}
		before := count()
		restore := cb.refusal.start(t, sub.s)
		sleepCtx(ctx, time.Duration(500+rnd.IntN(1500))*time.Millisecond)
		n := count()
		for deadline := time.Now().Add(10 * time.Second); n <= before && time.Now().Before(deadline); n = count() {
			sleepCtx(ctx, 200*time.Millisecond)
		}
		restore()
		refusals++
		refusalMet = max(refusalMet, n)
	}
	// outage stops the broker for chaosOutage, once.
	var outages, outageMet int
	outage := func() {
		t.Logf("chaos: the broker goes down for %s", *chaosOutage)
		cb.down(t)
		sleepCtx(ctx, *chaosOutage)
		n, err := h.countOutbox(ctx, true)
		if err != nil {
			t.Fatalf("counting the rows not sent at the outage's end: %v", err)
		}
		outageMet = n
		cb.up(t)
		outages++
	}
	outageAt := time.Now().Add(*chaosDuration * 2 / 5)
	lastBrokerKill := time.Now()
	third := time.Now().Add(*chaosDuration / 3)
	quarter, half := time.Now().Add(*chaosDuration/4), time.Now().Add(*chaosDuration/2)
	for prodCtx.Err() == nil {
		sleepCtx(prodCtx, time.Duration(300+rnd.IntN(1200))*time.Millisecond)
		if prodCtx.Err() != nil {
			break
		}
		i := rnd.IntN(len(relays))
		switch a := rnd.IntN(100); {
		case a < 30: // a relay dies, wherever it is in its batch
			relays[i].kill()
			sleepCtx(prodCtx, time.Duration(rnd.IntN(300))*time.Millisecond)
			relays[i] = startRelay(t, bin, dsn, url, relays[i].log, shortWindow(i))
			kills++
		case a < 45: // a relay is told to stop: it finishes its batch and exits 0
			if err := relays[i].term(30 * time.Second); err != nil {
				t.Errorf("relay stopped with SIGTERM: %v (log %s)", err, relays[i].log)
			}
			relays[i] = startRelay(t, bin, dsn, url, relays[i].log, shortWindow(i))
			terms++
		case a < 55: // a relay freezes (a long pause, a stalled VM) holding its claim
			d := time.Duration(500+rnd.IntN(2500)) * time.Millisecond
			if freezes%4 == 0 { // the first and every fourth: past its lease (SQLite)
				d = relayLease + time.Duration(1000+rnd.IntN(2000))*time.Millisecond
				longFreezes++
			}
			relays[i].freeze(d)
			freezes++
		case a < 65 && st.dropRelayConns != nil: // the database drops the relays' connections
			n, err := st.dropRelayConns(ctx)
			if err != nil {
				t.Fatal(err)
			}
			dbDrops += n
		case a < 70: // an operator deletes old SENT rows while everything runs
			n, err := cleanup(ctx, bin, dsn)
			if err != nil {
				t.Fatalf("outbox cleanup: %v", err)
			}
			cleaned += n
			cleanups++
		case a < 75: // the subscriber goes away and comes back
			sub.stop(t)
			sub = startChaosSubscriber(ctx, t, cb, h)
			subRestarts++
		case a < 85 && time.Since(lastBrokerKill) > cb.restartGap: // the broker goes down and comes back
			cb.restart(t)
			lastBrokerKill = time.Now()
			brokerKills++
		case a >= 85 && a < 95: // the subscriber crashes in the middle of a handler
			crashSub()
		case a >= 95: // the broker refuses every publish for a while
			refuse()
		}
		if refusals == 0 && time.Now().After(third) {
			refuse()
		}
		if outages == 0 && time.Now().After(outageAt) {
			outage()
			lastBrokerKill = time.Now()
		}
		// At least two crashes: one in which the handlers die, one in
		// which they finish.
		if len(subCrashes) == 0 && time.Now().After(quarter) || len(subCrashes) == 1 && time.Now().After(half) {
			crashSub()
		}
		if dupRounds == 0 && time.Now().After(half) {
			chaosDuplicates(ctx, t, b, h)
			dupRounds++
		}
	}
	prodWG.Wait()
	if outages == 0 {
		outage()
	}
	if dupRounds == 0 {
		chaosDuplicates(ctx, t, b, h)
	}
	committed := h.committedIDs()
	t.Logf("chaos over after %s: %d transactions (%d committed); relays: %d SIGKILLs, %d SIGTERMs, %d freezes (%d past the claim's lease), %d database connections dropped; %d broker restarts, %d subscriber restarts; %d cleanups deleted %d SENT rows",
		*chaosDuration, produced.Load()+late.Load(), len(committed), kills, terms, freezes, longFreezes, dbDrops, brokerKills, subRestarts, cleanups, cleaned)
	logSubCrashes(t, subCrashes, idleCrashes)
	t.Logf("chaos: the broker refused every publish %d times for 0.5-10 s (%s); the relays met it: at most %d rows with it as their last error and relay log lines naming it",
		refusals, cb.refusal.what, refusalMet)
	t.Logf("chaos: the broker was down %d time for %s; %d rows were not sent at its end", outages, *chaosOutage, outageMet)
	h.cleaned = cleaned
	if st.lateTx != nil {
		t.Logf("chaos: %d of those held their outbox row's id for 0.1-3 s before committing or rolling back", late.Load())
	}

	// Every relay drains the table; every effect arrives.
	h.waitOutboxDrained(ctx, t)
	h.waitEffects(ctx, t, len(committed), "every committed message's effect")
	time.Sleep(2 * time.Second) // stray redeliveries
	for _, r := range relays {
		if err := r.term(30 * time.Second); err != nil {
			t.Errorf("relay stopped with SIGTERM at the end: %v (log %s)", err, r.log)
		}
	}
	// The crashed subscribers' handlers have finished, or been given up on.
	for _, gone := range crashed {
		<-gone
	}
	h.check(t, committed)
	dead, err := h.countDead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("chaos: %d DEAD rows", dead)
	if dead > 0 {
		t.Errorf("%d rows are DEAD: no message may die of the chaos (outages, refusals, restarts)", dead)
	}
	if outageMet == 0 {
		t.Errorf("no row was waiting at the end of the broker's %s outage, so the outage was not tested", *chaosOutage)
	}
	if refusalMet == 0 && *chaosDuration >= 30*time.Second {
		t.Errorf("the broker refused every publish %d times, yet no row had that refusal (%s) as its last error and no relay logged it: the relays never met it, so it was not tested", refusals, cb.refusal.like)
	}
	if len(subCrashes) < 2 && *chaosDuration >= 30*time.Second {
		t.Errorf("the subscriber crashed %d times in the middle of a handler, not at least twice (handlers dying, and finishing), so that check was not made", len(subCrashes))
	}
	// What the relays logged (warnings and errors: the chaos causes many).
	for _, r := range relays {
		if b, err := os.ReadFile(r.log); err == nil {
			n := 10
			if t.Failed() {
				n = 40
			}
			t.Logf("%s, last lines:\n%s", filepath.Base(r.log), lastLines(b, n))
		}
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

func startChaosSubscriber(ctx context.Context, t *testing.T, cb *chaosBroker, h *harness) *chaosSub {
	t.Helper()
	proxy := startProxy(t, cb.addr)
	s := cb.via(proxy.addr()).NewSubscriber(t, group)
	sctx, cancel := context.WithCancel(ctx)
	hctx, hcancel := context.WithCancel(context.Background())
	c := &chaosSub{s: s, proxy: proxy, cancel: cancel, done: make(chan error, 1), hctx: hctx, hcancel: hcancel,
		inside: make(chan struct{}), release: make(chan struct{})}
	inner := h.handler()
	handler := func(ctx context.Context, m outbox.Message) error {
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
		return inner(ctx, m)
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
// after writing its message.
func chaosProduce(ctx context.Context, t *testing.T, h *harness, prefix string, tx txFunc, produced *atomic.Int64) {
	for i := 0; ctx.Err() == nil; i++ {
		id := fmt.Sprintf("%s-%06d", prefix, i)
		acct := fmt.Sprintf("acct-%d", i%7)
		amount := i%100 + 1
		m := outbox.Message{MsgID: id, Topic: h.b.Topic, Key: acct, Payload: []byte(fmt.Sprintf(`{"account":%q,"amount":%d}`, acct, amount))}
		err := tx(ctx, m, acct, amount, i%10 == 9)
		if err != nil && ctx.Err() != nil {
			err = errRollback // ended mid-transaction: it rolled back, or failed before
		}
		if err := h.record(id, transfer{Account: acct, Amount: amount}, err); err != nil {
			t.Errorf("business transaction %s: %v", id, err)
			return
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

//go:build chaos

package e2e

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/brokertest"
	"github.com/outbox-go/outbox/driver/outboxpgx"
)

// chaosConsumerDB is the chaos run's consumer database: a PostgreSQL schema
// of the run's own, which the subscriber's inbox reaches through a proxy of
// its own, so that the run can take the database away from the consumer
// (and only from it) for a while. The checks read it directly.
type chaosConsumerDB struct {
	proxy *tcpProxy

	down atomic.Bool
	// What the handlers returned while the database was away.
	calls, unavailable, succeeded atomic.Int64
	mu                            sync.Mutex
	other                         []string         // errors not classed as unavailable
	calls2                        map[string]int   // handler calls per message
	lastErr                       map[string]error // the last handler error per message
	// backAfter is how long after the database's return the first effect
	// arrived; recovered is closed then, or when the wait gives up.
	backAfter time.Duration
	recovered chan struct{}
}

// useProxiedConsumer moves the harness's consumer to a PostgreSQL schema of
// the run's own, reached by the inbox through a proxy.
func useProxiedConsumer(ctx context.Context, t *testing.T, h *harness) *chaosConsumerDB {
	t.Helper()
	admin, err := sql.Open("pgx", PostgresDSN())
	if err == nil {
		err = admin.PingContext(ctx)
	}
	if err != nil {
		t.Fatalf("PostgreSQL at %s is required for the chaos run's consumer: %v", PostgresDSN(), err)
	}
	t.Cleanup(func() { admin.Close() })
	schema := "chaos_consumer_" + randomHex(4)
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	u, err := url.Parse(PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	dsn := PostgresDSN() + "&search_path=" + schema
	if !strings.Contains(PostgresDSN(), "?") {
		dsn = PostgresDSN() + "?search_path=" + schema
	}
	c := &chaosConsumerDB{proxy: startProxy(t, u.Host), recovered: make(chan struct{}), calls2: map[string]int{}, lastErr: map[string]error{}}
	direct, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	proxied, err := sql.Open("pgx", strings.Replace(dsn, u.Host, c.proxy.addr(), 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxied.Close() })
	drv, err := outboxpgx.NewStdlib(proxied, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	// effects has no unique key on purpose: a second effect would show.
	if _, err := direct.ExecContext(ctx, `CREATE TABLE effects (msg_id TEXT NOT NULL, account TEXT NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	h.consumer.Close()
	h.consumer = direct
	h.inbox = outbox.NewInbox[*sql.Tx](&faultyInbox{Driver: drv, h: h, pending: map[*sql.Tx]string{}})
	h.insertEffect = `INSERT INTO effects (msg_id, account, amount) VALUES ($1, $2, $3)`
	return c
}

// handled notes what a handler returned for msgID.
func (c *chaosConsumerDB) handled(msgID string, err error) {
	c.mu.Lock()
	c.calls2[msgID]++
	c.lastErr[msgID] = err
	c.mu.Unlock()
	if !c.down.Load() {
		return
	}
	c.calls.Add(1)
	switch {
	case err == nil:
		c.succeeded.Add(1)
	case outbox.IsUnavailable(err):
		c.unavailable.Add(1)
	case strings.Contains(err.Error(), "e2e: injected"): // the harness's own faults
	default:
		c.mu.Lock()
		c.other = append(c.other, err.Error())
		c.mu.Unlock()
	}
}

// outage takes the database away from the consumer for d: every connection
// through the proxy is cut and new ones are reset on arrival. Then it
// watches, in the background, for the first effect after the return.
func (c *chaosConsumerDB) outage(ctx context.Context, t *testing.T, h *harness, d time.Duration) {
	t.Helper()
	t.Logf("chaos: the consumer's database goes away for %s", d)
	c.down.Store(true)
	c.proxy.kill()
	sleepCtx(ctx, d)
	before := h.countEffects(ctx, t)
	c.proxy.heal()
	back := time.Now()
	c.down.Store(false)
	go func() {
		defer close(c.recovered)
		for time.Since(back) < 3*time.Minute && ctx.Err() == nil {
			n, err := h.effectCount(ctx)
			if err == nil && n > before {
				c.backAfter = time.Since(back)
				return
			}
			sleepCtx(ctx, 100*time.Millisecond)
		}
	}()
}

// report logs how the consumer took the outage and fails the run where it
// did not pause: a handler error not classed as unavailable counts toward
// the dead-letter path.
func (c *chaosConsumerDB) report(t *testing.T, d time.Duration) {
	t.Helper()
	<-c.recovered
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Logf("chaos: the consumer's database was away for %s: %d handler calls meanwhile, %d unavailable, %d succeeded, %d other errors; first effect %s after its return",
		d, c.calls.Load(), c.unavailable.Load(), c.succeeded.Load(), len(c.other), c.backAfter.Round(100*time.Millisecond))
	if c.calls.Load() == 0 || c.unavailable.Load() == 0 {
		t.Errorf("no handler met the consumer's database outage as unavailable (%d calls), so the outage was not tested", c.calls.Load())
	}
	if c.succeeded.Load() > 0 {
		t.Errorf("%d handler calls succeeded while the consumer's database was away: the proxy did not cut it off", c.succeeded.Load())
	}
	if len(c.other) > 0 {
		t.Errorf("%d handler errors during the consumer's database outage were not classed as unavailable (they count toward dead-lettering), e.g. %q",
			len(c.other), c.other[:min(3, len(c.other))])
	}
	if c.backAfter == 0 {
		t.Errorf("no effect arrived within 3 minutes of the consumer's database's return")
	}
}

// history is how many times the consumer's handlers were called with
// msgID, and what the last call returned.
func (c *chaosConsumerDB) history(msgID string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls2[msgID], c.lastErr[msgID]
}

// effectCount counts the distinct effects in the consumer's database.
func (h *harness) effectCount(ctx context.Context) (n int, err error) {
	err = h.consumer.QueryRowContext(ctx, `SELECT count(DISTINCT msg_id) FROM effects`).Scan(&n)
	return n, err
}

func (h *harness) countEffects(ctx context.Context, t *testing.T) int {
	t.Helper()
	n, err := h.effectCount(ctx)
	if err != nil {
		t.Fatalf("counting effects: %v", err)
	}
	return n
}

// keyOrder records, for per-key order, each committed message's outbox id,
// and the order in which two groups first saw each message: the consumer
// (crashed, stopped, its database taken away) and a watcher, a group of
// its own that only records what arrives and is never stopped.
type keyOrder struct {
	mu      sync.Mutex
	ids     map[string]int64 // msg_id → outbox id, of committed messages
	watcher firstArrivals
	sub     firstArrivals
}

// firstArrivals are one group's first deliveries of keyed messages, in arrival
// order.
type firstArrivals struct {
	seen  map[string]bool
	first []firstDelivery
}

type firstDelivery struct{ msgID, key string }

func newKeyOrder() *keyOrder {
	return &keyOrder{ids: map[string]int64{}, watcher: firstArrivals{seen: map[string]bool{}}, sub: firstArrivals{seen: map[string]bool{}}}
}

func (o *keyOrder) committed(msgID string, id int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ids[msgID] = id
}

// delivered notes a delivery to a, at the handler's start.
func (o *keyOrder) delivered(a *firstArrivals, m outbox.Message) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if a.seen[m.MsgID] {
		return
	}
	a.seen[m.MsgID] = true
	if m.Key != "" {
		a.first = append(a.first, firstDelivery{m.MsgID, m.Key})
	}
}

// watch runs the watcher's group until ctx ends; wait waits until it has
// seen every committed message (up to a minute without a new one).
func (o *keyOrder) watch(ctx context.Context, t *testing.T, cb *chaosBroker) (s brokertest.Subscriber, wait func(committed []string)) {
	t.Helper()
	sub := cb.Broker.NewSubscriber(t, watchGroup)
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(ctx, func(_ context.Context, m outbox.Message) error {
			o.delivered(&o.watcher, m)
			return nil
		})
	}()
	t.Cleanup(func() {
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the order watcher's subscriber: %v", err)
		}
		closeIfCloser(sub)
	})
	return sub, func(committed []string) {
		last, progress := -1, time.Now()
		for time.Since(progress) < time.Minute {
			o.mu.Lock()
			n := 0
			for _, id := range committed {
				if o.watcher.seen[id] {
					n++
				}
			}
			o.mu.Unlock()
			if n == len(committed) {
				return
			}
			if n > last {
				last, progress = n, time.Now()
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("the order watcher's group received %d of the %d committed messages, none new for a minute", last, len(committed))
	}
}

// watchGroup is the order watcher's consumer group.
const watchGroup = "chaos-order"

// check reports the per-key order violations among each group's first
// deliveries: a message that arrived after one of its key with a higher
// outbox id. Where the broker keeps one ordered log (cb.streamOrder), the
// run fails on publish-order violations only: a message whose first copy
// in the log comes after one of its key with a higher id. A watcher arrival
// out of id order whose copies are in order in the log is the consumer
// side's (JetStream hands back, after AckWait, what it had delivered when
// it was killed); those are reported with their count. Elsewhere the
// watcher's arrival violations fail the run. The consumer's are reported:
// its crashes and restarts leave messages it had fetched and not handled to
// come back after the broker's redelivery delay, behind later ones.
func (o *keyOrder) check(ctx context.Context, t *testing.T, cb *chaosBroker) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	n, keys, unknown, violations := o.violations(&o.watcher)
	t.Logf("chaos: per-key order, watcher group %q: %d first deliveries of keyed messages over %d keys (%d more whose id was not read); %d arrival order violations",
		watchGroup, n, keys, unknown, len(violations))
	if n == 0 {
		t.Errorf("no keyed message reached the order watcher, so per-key order was not checked")
	}
	if cb.streamOrder == nil {
		if len(violations) > 0 {
			t.Errorf("%d per-key order violations among first deliveries, e.g.:\n%s", len(violations), strings.Join(violationText(violations, nil), "\n"))
		}
	} else {
		o.checkStream(ctx, t, cb, violations)
	}
	n, keys, _, violations = o.violations(&o.sub)
	t.Logf("chaos: per-key order, consumer group %q (crashed and restarted): %d first deliveries over %d keys; %d arrived after a later message of their key (redelivered after a crash), e.g. %v",
		group, n, keys, len(violations), violationText(violations[:min(3, len(violations))], nil))
}

// checkStream fails the run on publish-order violations in cb's log, and
// reports the watcher's arrival violations, each with the log positions of
// its two messages.
func (o *keyOrder) checkStream(ctx context.Context, t *testing.T, cb *chaosBroker, arrival []orderViolation) {
	t.Helper()
	stored, err := cb.streamOrder(ctx)
	if err != nil {
		t.Errorf("reading the broker's stream for per-key order: %v", err)
		return
	}
	published, copies := o.streamViolations(stored)
	t.Logf("chaos: per-key order, %s: %d messages stored, %d stored more than once; %d publish-order violations",
		cb.orderName, len(stored), copies, len(published))
	if len(published) > 0 {
		t.Errorf("%d per-key publish-order violations in the broker's stream (%s), e.g.:\n%s", len(published), cb.orderName,
			strings.Join(violationText(published[:min(10, len(published))], stored), "\n"))
	}
	consumer := 0
	for _, v := range arrival {
		if a, b := stored[v.msgID], stored[v.after]; a.seq < b.seq {
			consumer++
		}
	}
	t.Logf("chaos: per-key order, watcher: %d of the %d arrival order violations are the consumer side's (stored in order, delivered out of it), e.g.:\n%s",
		consumer, len(arrival), strings.Join(violationText(arrival[:min(10, len(arrival))], stored), "\n"))
}

// streamViolations walks stored in log order and returns each keyed message
// whose first copy follows one of its key with a higher outbox id, and how
// many messages were stored more than once.
func (o *keyOrder) streamViolations(stored map[string]storedCopy) (violations []orderViolation, copies int) {
	type entry struct {
		msgID string
		seq   uint64
	}
	keyOf := map[string]string{}
	for _, d := range o.watcher.first {
		keyOf[d.msgID] = d.key
	}
	var log []entry
	for id, sc := range stored {
		if sc.copies > 1 {
			copies++
		}
		if _, ok := o.ids[id]; ok && keyOf[id] != "" {
			log = append(log, entry{id, sc.seq})
		}
	}
	slices.SortFunc(log, func(a, b entry) int { return cmp.Compare(a.seq, b.seq) })
	top := map[string]string{}
	for _, e := range log {
		k := keyOf[e.msgID]
		if l, ok := top[k]; ok && o.ids[e.msgID] < o.ids[l] {
			violations = append(violations, orderViolation{k, e.msgID, o.ids[e.msgID], l, o.ids[l]})
			continue
		}
		top[k] = e.msgID
	}
	return violations, copies
}

// orderViolation is msgID (outbox id id) coming after msgID after (a higher
// outbox id afterID) of its key.
type orderViolation struct {
	key, msgID string
	id         int64
	after      string
	afterID    int64
}

// violationText is vs as text, with each message's log position and copies
// where stored is not nil.
func violationText(vs []orderViolation, stored map[string]storedCopy) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		s := fmt.Sprintf("key %s: %s (id %d) after %s (id %d)", v.key, v.msgID, v.id, v.after, v.afterID)
		if stored != nil {
			a, b := stored[v.msgID], stored[v.after]
			s += fmt.Sprintf("; stored at %d (%d copies) and %d (%d copies)", a.seq, a.copies, b.seq, b.copies)
		}
		out = append(out, s)
	}
	return out
}

func (o *keyOrder) violations(a *firstArrivals) (n, keys, unknown int, violations []orderViolation) {
	type last struct {
		id    int64
		msgID string
	}
	top := map[string]last{}
	for _, d := range a.first {
		id, ok := o.ids[d.msgID]
		if !ok {
			unknown++
			continue
		}
		n++
		if l, ok := top[d.key]; ok && id < l.id {
			violations = append(violations, orderViolation{d.key, d.msgID, id, l.msgID, l.id})
			continue
		}
		top[d.key] = last{id, d.msgID}
	}
	return n, len(top), unknown, violations
}

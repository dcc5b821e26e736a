package outboxredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
	"github.com/outbox-go/outbox/internal/redelivery"
)

// opTimeout bounds one command of the subscriber's own (XACK, XAUTOCLAIM,
// the dead-letter script), which runs on after Run's context ended so that
// what was decided is also written.
const opTimeout = 10 * time.Second

// Subscriber consumes one stream as one consumer of a consumer group and
// hands each message to a handler: XREADGROUP for new entries, XAUTOCLAIM for
// entries left unacknowledged for MinIdle, XACK after the handler succeeded,
// and a dead-letter stream after MaxDeliveries deliveries.
type Subscriber struct {
	rdb        redis.UniversalClient
	owned      bool // rdb is the subscriber's own, which Close closes
	addr       string
	cfg        SubscriberConfig
	stream     string
	dead       string
	claimEvery time.Duration
	block      time.Duration
	running    atomic.Bool
}

// NewSubscriber applies cfg's defaults, checks it, connects to Redis and
// creates the group on the stream (XGROUP CREATE ... MKSTREAM) unless it
// exists. When it returns, the group exists in Redis, so that messages
// added afterwards reach the group even before Run is called. A new group
// starts at the end of the stream ("$"), or at its start with
// StartFromBeginning; an existing group keeps its position.
//
// A configuration error satisfies errors.Is(err, ErrConfig); a
// server that cannot be reached gives an error that satisfies
// outbox.IsUnavailable.
func NewSubscriber(ctx context.Context, cfg SubscriberConfig) (*Subscriber, error) {
	cfg, conn, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	stream := streamKey(cfg.Stream, cfg.Topic)
	rdb, owned := conn.client()
	s := &Subscriber{
		rdb:        rdb,
		owned:      owned,
		addr:       conn.addr,
		cfg:        cfg,
		stream:     stream,
		dead:       deadKey(cfg.DeadLetterStream, stream, cfg.Group, cfg.Topic),
		claimEvery: min(cfg.MinIdle/2, 5*time.Second),
	}
	s.block = min(cfg.Block, s.claimEvery)
	start := "$"
	if cfg.StartFromBeginning {
		start = "0"
	}
	if err := s.createGroup(ctx, start); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func defaultConsumer() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "subscriber"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Stream returns the key of the stream the subscriber consumes.
func (s *Subscriber) Stream() string { return s.stream }

// DeadLetterStream returns the key of the group's dead-letter stream.
func (s *Subscriber) DeadLetterStream() string { return s.dead }

// Consumer returns the subscriber's consumer name within its group.
func (s *Subscriber) Consumer() string { return s.cfg.Consumer }

// Close closes the subscriber's connections; a Run in progress then returns
// an error. Stop Run by ending its context first.
func (s *Subscriber) Close() error {
	if !s.owned {
		return nil
	}
	return s.rdb.Close()
}

func (s *Subscriber) createGroup(ctx context.Context, start string) error {
	err := s.rdb.XGroupCreateMkStream(ctx, s.stream, s.cfg.Group, start).Err()
	switch {
	case err == nil, redis.HasErrorPrefix(err, "BUSYGROUP"):
		return nil
	case unavailable(err):
		return outbox.Unavailable(fmt.Errorf("outboxredis: cannot create consumer group %q on stream %s: Redis at %s: %w%s", s.cfg.Group, s.stream, s.addr, err, hint(err)))
	default:
		return fmt.Errorf("outboxredis: Redis refused to create consumer group %q on stream %s: %w%s", s.cfg.Group, s.stream, err, hint(err))
	}
}

// ErrAlreadyRunning is returned by Run when another Run of the same
// Subscriber has not returned yet.
var ErrAlreadyRunning = errors.New("outboxredis: Subscriber.Run is already running; build one Subscriber per consumer")

// Run consumes the stream and calls h for each message, one at a time in
// stream order, until ctx ends; then it lets the handler in hand finish
// (its context is canceled StopTimeout later), acknowledges it if it
// succeeded, and returns nil.
//
// Each delivery goes through cloudevents.Decode; an entry that is not an
// event goes to the dead-letter stream at once. h's nil error acknowledges
// the entry (XACK). After any other error Run keeps the entry claimed and
// hands it to h again after RedeliveryDelay (doubling, up to
// RedeliveryDelayMax), while the entries behind it wait. A failure that is
// at least the MaxDeliveries-th, once the entry has been failing for
// DeadLetterAfter, or an error that satisfies outbox.IsPermanent, moves the
// entry to the dead-letter stream and acknowledges it, both in one
// server-side script. An error that satisfies outbox.IsUnavailable (the
// handler's database is down) pauses Run with the same growing delay and
// is not counted. An entry left pending by a subscriber that died is
// delivered again, counted by Redis, once it has been idle for MinIdle.
//
// Run survives Redis going away: it retries with a growing pause (up to 2s)
// and, if the group vanished (a restart without persistence), creates it
// again at the start of the stream. It returns an error only for what
// retrying cannot cure: the subscriber was closed, or Redis refused a
// command for another reason than being unavailable (e.g. WRONGTYPE when
// the stream key holds another type).
func (s *Subscriber) Run(ctx context.Context, h outbox.Handler) error {
	if h == nil {
		return errors.New("outboxredis: Subscriber.Run: the handler is nil")
	}
	if !s.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer s.running.Store(false)

	// The handler's context outlives ctx by StopTimeout, so that the
	// handler in hand can finish its transaction when Run is stopped.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		t := time.NewTimer(s.cfg.StopTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			hcancel()
		case <-done:
		}
	}()

	r := &runner{s: s, ctx: ctx, hctx: hctx, h: h, cursor: "0-0"}
	defer s.forgetConsumer(ctx)
	return r.loop()
}

// runner is the state of one Run.
type runner struct {
	s         *Subscriber
	ctx       context.Context // Run's: ends the loop
	hctx      context.Context // the handler's: outlives ctx by StopTimeout
	h         outbox.Handler
	cursor    string // XAUTOCLAIM's position in the pending entries list
	lastClaim time.Time
}

func (r *runner) loop() error {
	pause := time.Duration(0)
	for r.ctx.Err() == nil {
		err := r.step()
		if err == nil {
			pause = 0
			continue
		}
		switch {
		case redis.HasErrorPrefix(err, "UNBLOCKED"):
			// The stream was deleted while XREADGROUP waited on it; the
			// next read finds out whether the group is gone too.
			continue
		case errors.Is(err, redis.ErrClosed):
			return errors.New("outboxredis: Subscriber.Run: the subscriber was closed while running")
		case redis.HasErrorPrefix(err, "NOGROUP"):
			// The stream or the group is gone: Redis restarted without
			// persistence, or someone deleted them. Everything in the
			// stream now is new to the group.
			err = r.s.createGroup(r.ctx, "0")
			if err == nil {
				continue
			}
			if !outbox.IsUnavailable(err) {
				return err
			}
		case !unavailable(err):
			return fmt.Errorf("outboxredis: consuming stream %s as group %q: %w%s", r.s.stream, r.s.cfg.Group, err, hint(err))
		}
		pause = min(max(2*pause, 50*time.Millisecond), 2*time.Second)
		t := time.NewTimer(pause)
		select {
		case <-r.ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

// step reclaims idle entries when it is time to, then reads new ones.
func (r *runner) step() error {
	if time.Since(r.lastClaim) >= r.s.claimEvery {
		more, err := r.reclaim()
		if err != nil {
			return err
		}
		r.lastClaim = time.Now()
		if more {
			// The pending entries list has more to scan: go on at once.
			r.lastClaim = time.Time{}
		}
		if r.ctx.Err() != nil {
			return nil
		}
	}
	return r.readNew()
}

func (r *runner) opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.ctx), opTimeout+r.s.block)
}

// readNew reads entries never delivered to the group. The read is not
// canceled with Run's context: entries it takes count as delivered, and an
// answer lost on the way would cost them a delivery.
func (r *runner) readNew() error {
	ctx, cancel := r.opContext()
	defer cancel()
	res, err := r.s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group:    r.s.cfg.Group,
		Consumer: r.s.cfg.Consumer,
		Streams:  []string{r.s.stream, ">"},
		Count:    int64(r.s.cfg.BatchSize),
		Block:    r.s.block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, st := range res {
		counts := make([]int64, len(st.Messages))
		for i := range counts {
			counts[i] = 1
		}
		if err := r.handleAll(st.Messages, counts); err != nil {
			return err
		}
	}
	return nil
}

// reclaim takes over entries idle for MinIdle (XAUTOCLAIM) and handles them.
// It reports whether the scan of the pending entries list has more to go.
func (r *runner) reclaim() (more bool, err error) {
	ctx, cancel := r.opContext()
	defer cancel()
	msgs, next, err := r.s.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream:   r.s.stream,
		Group:    r.s.cfg.Group,
		Consumer: r.s.cfg.Consumer,
		MinIdle:  r.s.cfg.MinIdle,
		Start:    r.cursor,
		Count:    int64(r.s.cfg.BatchSize),
	}).Result()
	if err != nil {
		return false, err
	}
	r.cursor = next
	more = next != "0-0" && next != ""
	if len(msgs) == 0 {
		return more, nil
	}
	// XAUTOCLAIM counted a delivery for each entry but does not say how
	// many there were; XPENDING does.
	pipe := r.s.rdb.Pipeline()
	cmds := make([]*redis.XPendingExtCmd, len(msgs))
	for i, m := range msgs {
		cmds[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: r.s.stream, Group: r.s.cfg.Group, Start: m.ID, End: m.ID, Count: 1,
		})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	var claimed []redis.XMessage
	var counts []int64
	for i, m := range msgs {
		pend, err := cmds[i].Result()
		if err != nil || len(pend) == 0 || pend[0].Consumer != r.s.cfg.Consumer {
			continue // acknowledged or taken over meanwhile
		}
		claimed = append(claimed, m)
		counts = append(counts, pend[0].RetryCount)
	}
	return more, r.handleAll(claimed, counts)
}

// handleAll handles entries in order. When Run's context ends before all
// are handled, the rest are given back to the group. The entries not yet
// settled, the one in hand and those waiting behind it, are kept claimed
// (keepClaimed) for as long as the batch takes, so that no other consumer
// takes a waiting entry as idle and handles it as well.
func (r *runner) handleAll(msgs []redis.XMessage, deliveries []int64) error {
	if r.s.cfg.Concurrency > 1 && len(msgs) > 1 {
		return r.handleByKey(msgs, deliveries)
	}
	ids := make([]string, len(msgs))
	for i := range msgs {
		ids[i] = msgs[i].ID
	}
	var next atomic.Int64 // the first entry not yet settled
	stop := r.keepClaimed(func() []string { return ids[next.Load():] })
	defer stop()
	for i := range msgs {
		if r.ctx.Err() != nil {
			stop()
			r.release(msgs[i:], deliveries[i:])
			return nil
		}
		err := r.handle(&msgs[i], deliveries[i])
		next.Store(int64(i + 1))
		if err != nil {
			return err
		}
	}
	return nil
}

// handleByKey is handleAll with Concurrency above 1: the entries of one key
// in order, keys in parallel (outbox.GoByKey). After an error, or once Run's
// context ends, no entry is started: the ones not started are given back
// to the group when the context ended, else left pending.
func (r *runner) handleByKey(msgs []redis.XMessage, deliveries []int64) error {
	key := AttributePrefix + cloudevents.PartitionKey
	var mu sync.Mutex
	unsettled := make(map[string]bool, len(msgs))
	for i := range msgs {
		unsettled[msgs[i].ID] = true
	}
	stop := r.keepClaimed(func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Collect(maps.Keys(unsettled))
	})
	defer stop()
	var first error
	var notStarted []int
	outbox.GoByKey(len(msgs), func(i int) string { k, _ := msgs[i].Values[key].(string); return k }, r.s.cfg.Concurrency, func(group []int) {
		for n, i := range group {
			mu.Lock()
			if first != nil || r.ctx.Err() != nil {
				notStarted = append(notStarted, group[n:]...)
				mu.Unlock()
				return
			}
			mu.Unlock()
			err := r.handle(&msgs[i], deliveries[i])
			mu.Lock()
			delete(unsettled, msgs[i].ID)
			if err != nil && first == nil {
				first = err
			}
			mu.Unlock()
		}
	})
	if first == nil && len(notStarted) > 0 {
		stop()
		slices.Sort(notStarted)
		rest, counts := make([]redis.XMessage, len(notStarted)), make([]int64, len(notStarted))
		for k, i := range notStarted {
			rest[k], counts[k] = msgs[i], deliveries[i]
		}
		r.release(rest, counts)
	}
	return first
}

// release gives entries this consumer took but did not hand to the handler
// back to the group: it marks them idle for MinIdle, so that XAUTOCLAIM
// hands them on at once, and takes back the delivery that was counted. On
// failure they come back after MinIdle anyway, one delivery spent.
func (r *runner) release(msgs []redis.XMessage, deliveries []int64) {
	if len(msgs) == 0 {
		return
	}
	ctx, cancel := r.opContext()
	defer cancel()
	pipe := r.s.rdb.Pipeline()
	for i, m := range msgs {
		pipe.Do(ctx, "XCLAIM", r.s.stream, r.s.cfg.Group, r.s.cfg.Consumer, 0, m.ID,
			"IDLE", r.s.cfg.MinIdle.Milliseconds(), "RETRYCOUNT", max(deliveries[i]-1, 0), "JUSTID")
	}
	_, _ = pipe.Exec(ctx)
}

// handle delivers one entry and settles it: ack, dead letter, or pending.
func (r *runner) handle(e *redis.XMessage, deliveries int64) error {
	limit := int64(r.s.cfg.MaxDeliveries)
	m, err := decodeEntry(e.Values)
	if err != nil {
		return r.deadLetter(e, deliveries, err.Error())
	}
	if deliveries > limit {
		return r.deadLetter(e, deliveries, fmt.Sprintf("delivered %d times, over MaxDeliveries (%d): a consumer stopped or died while handling it", deliveries, limit))
	}
	s := r.s
	policy := redelivery.Policy{MaxDeliveries: s.cfg.MaxDeliveries, Delay: s.cfg.RedeliveryDelay,
		DelayMax: s.cfg.RedeliveryDelayMax, DeadLetterAfter: s.cfg.DeadLetterAfter}
	// Redis counted this delivery; the handler's failures before it were
	// in earlier deliveries.
	res := policy.Deliver(int(deliveries-1), func() error { return r.h(r.hctx, m) },
		func(d time.Duration) bool {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-r.ctx.Done():
				return false
			case <-t.C:
				return true
			}
		}, nil)
	switch res.Outcome {
	case redelivery.Handled:
		ctx, cancel := r.opContext()
		defer cancel()
		return s.rdb.XAck(ctx, s.stream, s.cfg.Group, e.ID).Err()
	case redelivery.DeadLetter:
		if outbox.IsPermanent(res.Err) {
			return r.deadLetter(e, int64(res.Deliveries), "permanent handler error: "+res.Err.Error())
		}
		return r.deadLetter(e, int64(res.Deliveries), fmt.Sprintf("handler failed on delivery %d (MaxDeliveries %d, failing for DeadLetterAfter %s): %v",
			res.Deliveries, limit, s.cfg.DeadLetterAfter, res.Err))
	}
	// Stopping between two calls: left pending, delivered again after
	// MinIdle.
	return nil
}

// keepClaimed resets the idle time of the entries ids returns every
// MinIdle/2, until stop, so that no other consumer reclaims them meanwhile.
// XCLAIM with JUSTID does not count a delivery. The returned stop waits for
// a claim in flight; calling it again does nothing.
func (r *runner) keepClaimed(ids func() []string) (stop func()) {
	every := r.s.cfg.MinIdle / 2
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if list := ids(); len(list) > 0 {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), every)
			_ = r.s.rdb.XClaimJustID(ctx, &redis.XClaimArgs{
				Stream: r.s.stream, Group: r.s.cfg.Group, Consumer: r.s.cfg.Consumer, Messages: list,
			}).Err()
			cancel()
		}
		t.Reset(every)
	})
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// deadLetterScript adds the dead letter and acknowledges the entry
// atomically, and only if the XADD succeeded: a MULTI/EXEC would run the
// XACK even after the XADD failed (WRONGTYPE), losing the message.
// KEYS: stream, dead stream. ARGV: group, entry id, field-value pairs.
var deadLetterScript = redis.NewScript(`
redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
`)

func (r *runner) deadLetter(e *redis.XMessage, deliveries int64, reason string) error {
	names := make([]string, 0, len(e.Values))
	for name := range e.Values {
		if !strings.HasPrefix(name, "dead-") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	args := make([]any, 0, 2+2*len(names)+10)
	args = append(args, r.s.cfg.Group, e.ID)
	for _, name := range names {
		args = append(args, name, e.Values[name])
	}
	args = append(args,
		FieldDeadReason, reason,
		FieldDeadStream, r.s.stream,
		FieldDeadID, e.ID,
		FieldDeadGroup, r.s.cfg.Group,
		FieldDeadDeliveries, strconv.FormatInt(deliveries, 10),
	)
	ctx, cancel := r.opContext()
	defer cancel()
	err := deadLetterScript.Run(ctx, r.s.rdb, []string{r.s.stream, r.s.dead}, args...).Err()
	if err != nil && !unavailable(err) {
		return fmt.Errorf("cannot move entry %s to dead-letter stream %s: %w", e.ID, r.s.dead, err)
	}
	return err
}

// forgetConsumer deletes this consumer from the group when it holds no
// pending entries, so that stopped subscribers do not pile up in XINFO
// CONSUMERS. A consumer with pending entries stays: deleting it would drop
// them from the group.
func (s *Subscriber) forgetConsumer(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	pend, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: s.stream, Group: s.cfg.Group, Start: "-", End: "+", Count: 1, Consumer: s.cfg.Consumer,
	}).Result()
	if err != nil || len(pend) > 0 {
		return
	}
	_ = s.rdb.XGroupDelConsumer(ctx, s.stream, s.cfg.Group, s.cfg.Consumer).Err()
}

// DeadLetter is one entry of a dead-letter stream.
type DeadLetter struct {
	// ID is the dead letter's entry id in the dead-letter stream.
	ID string
	// Message is the message, as the handler would have received it; zero
	// when the entry was not an event.
	Message outbox.Message
	// DecodeErr says why Message is zero, if it is.
	DecodeErr error
	// Reason is why it was dead-lettered (FieldDeadReason).
	Reason string
	// Stream and EntryID are where it was read from.
	Stream, EntryID string
	// Deliveries is how many times the group delivered it.
	Deliveries int
	// Fields are all the entry's fields, as stored.
	Fields map[string]string
}

// DeadLetters returns up to count entries of the group's dead-letter stream,
// oldest first (XRANGE). count <= 0 means all of them.
func (s *Subscriber) DeadLetters(ctx context.Context, count int64) ([]DeadLetter, error) {
	return readDeadLetters(ctx, s.rdb, s.dead, count)
}

func readDeadLetters(ctx context.Context, rdb redis.Cmdable, key string, count int64) ([]DeadLetter, error) {
	var entries []redis.XMessage
	var err error
	if count > 0 {
		entries, err = rdb.XRangeN(ctx, key, "-", "+", count).Result()
	} else {
		entries, err = rdb.XRange(ctx, key, "-", "+").Result()
	}
	if err != nil {
		return nil, fmt.Errorf("outboxredis: reading dead-letter stream %s: %w", key, err)
	}
	out := make([]DeadLetter, 0, len(entries))
	for _, e := range entries {
		d := DeadLetter{ID: e.ID, Fields: make(map[string]string, len(e.Values))}
		for k, v := range e.Values {
			d.Fields[k], _ = v.(string)
		}
		d.Message, d.DecodeErr = decodeEntry(e.Values)
		d.Reason = d.Fields[FieldDeadReason]
		d.Stream = d.Fields[FieldDeadStream]
		d.EntryID = d.Fields[FieldDeadID]
		d.Deliveries, _ = strconv.Atoi(d.Fields[FieldDeadDeliveries])
		out = append(out, d)
	}
	return out, nil
}

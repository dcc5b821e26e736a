package outboxredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox"
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

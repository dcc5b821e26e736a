package outboxnats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// pullExpiry is how long one pull request waits on the server.
const pullExpiry = 5 * time.Second

// pull is one Run's supply of messages: the consumer's message iterator,
// and the messages taken out of it during an outage.
//
// During an outage the messages fetched ahead are taken out of the drained
// iterator and kept in progress (ahead), so that their AckWait does not run
// out and count deliveries; they are handled next, in order, and then a new
// iterator fetches on.
type pull struct {
	s       *Subscriber
	mu      sync.Mutex // guards it, which an outage replaces
	it      jetstream.MessagesContext
	ahead   *heldMsgs
	drained bool // it was drained at an outage; only Run's goroutine uses it
}

// newPull opens the consumer's message iterator.
func (s *Subscriber) newPull() (*pull, error) {
	it, err := s.messages()
	if err != nil {
		return nil, err
	}
	return &pull{s: s, it: it, ahead: &heldMsgs{}}, nil
}

// messages opens an iterator over the consumer's messages.
func (s *Subscriber) messages() (jetstream.MessagesContext, error) {
	it, err := s.cons.Messages(
		jetstream.PullMaxMessages(s.st.Prefetch),
		// Short pull requests (heartbeat every 2.5s) let the client
		// notice within seconds that a request got lost, e.g. one sent
		// while JetStream was still starting after a restart, and send
		// another.
		jetstream.PullExpiry(pullExpiry),
		jetstream.WithMessagesErrOnMissingHeartbeat(false),
	)
	if err != nil {
		return nil, jsError("consume from consumer "+s.st.consumer, err)
	}
	return it, nil
}

// current returns the iterator in use.
func (p *pull) current() jetstream.MessagesContext {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.it
}

// outage drains the iterator at the first outage and holds the messages it
// had fetched ahead.
func (p *pull) outage() {
	if p.drained {
		return
	}
	p.drained = true
	cur := p.current()
	cur.Drain()
	for {
		m, err := cur.Next(jetstream.NextMaxWait(p.s.st.Timeout))
		if err != nil {
			return
		}
		p.ahead.push(m)
	}
}

// reopen replaces the drained iterator with a new one.
func (p *pull) reopen(ctx context.Context) error {
	nit, err := p.s.messages()
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.it = nit
	p.mu.Unlock()
	p.drained = false
	if ctx.Err() != nil {
		nit.Drain() // ctx ended while the old iterator was current
	}
	return nil
}

// next returns the next message: a held one first, else one from the
// iterator, which is replaced once an outage drained it. done reports that
// Run should return err; a nil message otherwise asks to call next again.
func (p *pull) next(ctx context.Context) (msg jetstream.Msg, done bool, err error) {
	if msg, ok := p.ahead.pop(); ok {
		return msg, false, nil
	}
	if p.drained {
		if ctx.Err() != nil {
			return nil, true, nil
		}
		err := p.reopen(ctx)
		return nil, err != nil, err
	}
	cur := p.current()
	if ctx.Err() != nil {
		msg, err = cur.Next(jetstream.NextMaxWait(p.s.st.Timeout))
	} else {
		msg, err = cur.Next()
	}
	if err == nil {
		return msg, false, nil
	}
	if ctx.Err() != nil {
		return nil, true, nil
	}
	s := p.s
	if errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, jetstream.ErrBadRequest) || s.nc.IsClosed() {
		return nil, true, fmt.Errorf("outboxnats: consuming group %q from stream %s stopped: %w", s.st.Group, s.st.Stream, err)
	}
	s.log.Warn("outboxnats: consuming", "group", s.st.Group, "err", err)
	return nil, false, nil
}

// heldMsgs are messages fetched ahead and taken out of their iterator
// during an outage, in order.
type heldMsgs struct {
	mu   sync.Mutex
	msgs []jetstream.Msg
}

func (q *heldMsgs) push(m jetstream.Msg) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs = append(q.msgs, m)
}

func (q *heldMsgs) pop() (jetstream.Msg, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.msgs) == 0 {
		return nil, false
	}
	m := q.msgs[0]
	q.msgs[0] = nil
	q.msgs = q.msgs[1:]
	return m, true
}

// keepAlive tells the broker every period that the held messages are in
// progress, until stop.
func (q *heldMsgs) keepAlive(period time.Duration) (stop func()) {
	return inProgressEvery(period, func() []jetstream.Msg {
		q.mu.Lock()
		defer q.mu.Unlock()
		return slices.Clone(q.msgs)
	})
}

// inProgressEvery sends InProgress for each message msgs returns, every
// period, until stop; stop returns once the last round is over.
func inProgressEvery(period time.Duration, msgs func() []jetstream.Msg) (stop func()) {
	t := time.NewTicker(period)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-t.C:
				for _, m := range msgs() {
					_ = m.InProgress()
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		t.Stop()
		close(done)
		<-finished
	}
}

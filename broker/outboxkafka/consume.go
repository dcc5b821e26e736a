package outboxkafka

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox"
)

// process handles the records of one poll, partitions in parallel, and
// returns the last record done of each partition, and the records whose
// next delivery is due in a later poll (see deliver).
func (s *Subscriber) process(ctx context.Context, fetches kgo.Fetches, h outbox.Handler) (done, later []*kgo.Record) {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, s.concurrency)
	)
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var last *kgo.Record
			for _, r := range p.Records {
				if ctx.Err() != nil {
					break
				}
				ok, again := s.deliver(ctx, r, h)
				if again {
					mu.Lock()
					later = append(later, r)
					mu.Unlock()
				}
				if !ok {
					break
				}
				last = r
			}
			if last != nil {
				mu.Lock()
				done = append(done, last)
				mu.Unlock()
			}
		}()
	})
	wg.Wait()
	return done, later
}

// retryKey names the partition of a record whose handler failed.
type retryKey struct {
	topic     string
	partition int32
}

// retryState is the redelivery of a record whose handler failed, kept
// across polls.
type retryState struct {
	offset     int64
	deliveries int       // failed deliveries counted
	outages    int       // failures in a row that were outages
	first      time.Time // of the first counted failure
	next       time.Time // when the handler may have the record again
	paused     bool      // its partition is paused until next
}

// retryOf returns the redelivery state of rec and whether it is kept, or a
// new state, not kept yet.
func (s *Subscriber) retryOf(rec *kgo.Record) (st *retryState, kept bool) {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	st = s.retries[retryKey{rec.Topic, rec.Partition}]
	if st == nil || st.offset != rec.Offset {
		return &retryState{offset: rec.Offset}, false
	}
	return st, true
}

// keepRetry keeps st, the redelivery state of rec, across polls.
func (s *Subscriber) keepRetry(rec *kgo.Record, st *retryState) {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	s.retries[retryKey{rec.Topic, rec.Partition}] = st
}

// forgetRetry drops the redelivery state of rec, which is done.
func (s *Subscriber) forgetRetry(rec *kgo.Record) {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	delete(s.retries, retryKey{rec.Topic, rec.Partition})
}

// pauseUntilDue sets the partitions of recs back to them and pauses them
// until their next delivery is due. It runs in Run's goroutine before
// AllowRebalance, as SetOffsets asks.
func (s *Subscriber) pauseUntilDue(recs []*kgo.Record) {
	if len(recs) == 0 {
		return
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	pause := map[string][]int32{}
	s.retryMu.Lock()
	for _, r := range recs {
		if offsets[r.Topic] == nil {
			offsets[r.Topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
		pause[r.Topic] = append(pause[r.Topic], r.Partition)
		if st := s.retries[retryKey{r.Topic, r.Partition}]; st != nil {
			st.paused = true
		}
	}
	s.retryMu.Unlock()
	s.cl.PauseFetchPartitions(pause)
	s.cl.SetOffsets(offsets)
}

// resumeDue resumes the paused partitions whose record is due, and returns
// the earliest time another is.
func (s *Subscriber) resumeDue() (next time.Time, ok bool) {
	now := time.Now()
	resume := map[string][]int32{}
	s.retryMu.Lock()
	for k, st := range s.retries {
		switch {
		case !st.paused:
		case !st.next.After(now):
			st.paused = false
			resume[k.topic] = append(resume[k.topic], k.partition)
		case !ok || st.next.Before(next):
			next, ok = st.next, true
		}
	}
	s.retryMu.Unlock()
	if len(resume) > 0 {
		s.cl.ResumeFetchPartitions(resume)
	}
	return next, ok
}

// deliver hands rec to h until it succeeds or goes to the dead-letter
// topic, and reports whether rec is done (may be committed). A failed
// record is handed to h again after the redelivery policy's delay, and the
// later records of its partition wait. A short wait is slept in place; a
// longer one, which would keep the poll (and a rebalance of the group)
// waiting, ends deliver with again: Run pauses the partition at rec until
// the delay has passed, and a later poll hands rec to deliver again. deliver
// also reports false, without again, when ctx ends between deliveries.
func (s *Subscriber) deliver(ctx context.Context, rec *kgo.Record, h outbox.Handler) (ok, again bool) {
	m, err := decodeRecord(rec)
	if err != nil {
		return s.deadLetter(ctx, rec, err, 0), false
	}
	hctx := context.WithoutCancel(ctx)
	p := s.redelivery
	st, kept := s.retryOf(rec)
	forget := func() {
		if kept {
			s.forgetRetry(rec)
		}
	}
	// How long this call may hold the poll.
	hold := time.Now().Add(min(s.rebalance/4, maxPollHold))
	for {
		if wait := time.Until(st.next); wait > 0 {
			if time.Now().Add(wait).After(hold) {
				return false, true
			}
			if !sleep(ctx, wait) {
				return false, false
			}
		}
		err := h(hctx, m)
		switch {
		case err == nil:
			forget()
			return true, false
		case outbox.IsPermanent(err):
			forget()
			return s.deadLetter(ctx, rec, err, st.deliveries+1), false
		}
		if !kept {
			s.keepRetry(rec, st)
			kept = true
		}
		var d time.Duration
		msg := "outboxkafka: handler failed; delivering again"
		if outbox.IsUnavailable(err) {
			st.outages++
			d = p.Backoff(st.outages)
			msg = "outboxkafka: handler reports an outage; pausing the partition, the delivery is not counted"
		} else {
			st.outages = 0
			st.deliveries++
			if st.first.IsZero() {
				st.first = time.Now()
			}
			if p.Exhausted(st.deliveries, time.Since(st.first)) {
				forget()
				return s.deadLetter(ctx, rec, err, st.deliveries), false
			}
			d = p.Backoff(st.deliveries)
		}
		st.next = time.Now().Add(d)
		s.log.Info(msg, "group", s.group, "msg_id", m.MsgID, "topic", rec.Topic, "partition", rec.Partition,
			"offset", rec.Offset, "deliveries", st.deliveries, "retry_in", d, "err", err)
	}
}

// maxPollHold bounds how long deliver sleeps in place before it pauses the
// partition instead.
const maxPollHold = 5 * time.Second

package outboxnats

import "sync"

// settledMin is the fewest stream sequences a subscriber remembers as settled.
const settledMin = 1024

// settledSeqs remembers the stream sequences of the last messages this
// subscriber acked or dead-lettered, so that copies of them delivered
// again while they waited in the prefetch buffer are not handled twice or
// taken for a message that kept failing.
type settledSeqs struct {
	mu   sync.Mutex
	set  map[uint64]struct{}
	ring []uint64
	next int
}

func newSettledSeqs(n int) *settledSeqs {
	return &settledSeqs{set: make(map[uint64]struct{}, n), ring: make([]uint64, 0, n)}
}

func (s *settledSeqs) add(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.set[seq]; ok {
		return
	}
	if len(s.ring) < cap(s.ring) {
		s.ring = append(s.ring, seq)
	} else {
		delete(s.set, s.ring[s.next])
		s.ring[s.next] = seq
		s.next = (s.next + 1) % len(s.ring)
	}
	s.set[seq] = struct{}{}
}

func (s *settledSeqs) has(seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.set[seq]
	return ok
}

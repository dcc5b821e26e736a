package outboxmqtt

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho/session/state"
	"github.com/eclipse/paho.golang/paho/store/memory"
)

// ackSession is paho's in-memory session state with one change: the PUBACK
// of a received message is not sent when paho's callbacks return, but when
// the subscriber calls ackIfCurrent after its handler succeeded.
//
// paho's own manual acknowledgement (EnableManualAcknowledgment) sends the
// acks from a ticker (every 50ms by default), which caps a subscriber at
// Receive Maximum messages per tick and leaves no way to know that the ack
// of the last message went out before a graceful stop disconnects. Here the
// PUBACK is written at once, in the subscriber's goroutine, and the
// subscriber handles messages one at a time in arrival order, so the acks
// keep the order MQTT requires.
//
// The generation changes whenever a connection starts or ends. A message is
// acked only on the connection it came from: after a reconnection its packet
// identifier may name another message, and the broker sends the unacked one
// again anyway (the session persists).
type ackSession struct {
	*state.State
	mu  sync.Mutex
	gen uint64
}

func newAckSession() *ackSession {
	return &ackSession{State: state.NewInMemory()}
}

func (s *ackSession) ConAckReceived(conn io.Writer, cp *packets.Connect, ca *packets.Connack) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	return s.State.ConAckReceived(conn, cp, ca)
}

func (s *ackSession) ConnectionLost(dp *packets.Disconnect) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	return s.State.ConnectionLost(dp)
}

// Ack is what paho calls once its callbacks have returned: it does nothing,
// the subscriber acks through ackIfCurrent.
func (s *ackSession) Ack(*packets.Publish) error { return nil }

// generation returns the current connection's generation.
func (s *ackSession) generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// ackIfCurrent sends the PUBACK of pb if the connection it arrived on (gen)
// is still the current one, and reports whether it did.
func (s *ackSession) ackIfCurrent(gen uint64, pb *packets.Publish) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen || pb.QoS == 0 {
		return gen == s.gen
	}
	return s.State.Ack(pb) == nil
}

// newPublisherSession is paho's in-memory session state with a client store
// that does not copy: see lazyStore.
func newPublisherSession() *state.State {
	return state.New(&lazyStore{data: map[uint16]lazyPacket{}}, memory.New())
}

// lazyStore holds the packets a publisher has sent and the broker has not
// yet acknowledged, so that paho can send them again on a new connection.
// paho's own memory store encodes every PUBLISH into bytes as it is sent,
// which for a relay is a second encoding of every message (its user
// properties and payload); this store keeps the packet and encodes it only
// when it is asked for it, after a reconnection. paho never changes a packet
// once stored: to send one again it parses the stored bytes into a new one.
type lazyStore struct {
	mu   sync.Mutex
	data map[uint16]lazyPacket
	seq  int // Put order, for List
}

type lazyPacket struct {
	seq int
	w   io.WriterTo
}

// Put stores the packet without encoding it.
func (s *lazyStore) Put(id uint16, _ byte, w io.WriterTo) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[id] = lazyPacket{seq: s.seq, w: w}
	s.seq++
	return nil
}

// Get encodes the stored packet.
func (s *lazyStore) Get(id uint16) (io.ReadCloser, error) {
	s.mu.Lock()
	p, ok := s.data[id]
	s.mu.Unlock()
	if !ok {
		return nil, memory.ErrNotInStore
	}
	var b bytes.Buffer
	if _, err := p.w.WriteTo(&b); err != nil {
		return nil, fmt.Errorf("outboxmqtt: encoding stored packet %d: %w", id, err)
	}
	return io.NopCloser(&b), nil
}

func (s *lazyStore) Delete(id uint16) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.data[id]; !ok {
		return fmt.Errorf("outboxmqtt: packet %d is not in the session store", id)
	}
	delete(s.data, id)
	return nil
}

// Quarantine drops a packet paho found corrupt, as paho's memory store does.
func (s *lazyStore) Quarantine(id uint16) error { return s.Delete(id) }

// List returns the stored packet identifiers in the order they were Put.
func (s *lazyStore) List() ([]uint16, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Collect(maps.Keys(s.data))
	slices.SortFunc(ids, func(a, b uint16) int { return s.data[a].seq - s.data[b].seq })
	return ids, nil
}

func (s *lazyStore) Reset() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.data)
	return nil
}

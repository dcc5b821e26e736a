package outboxmqtt

import (
	"io"
	"sync"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho/session/state"
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

package brokertest

import (
	"errors"
	"net"
	"sync"
)

// ErrKilled is what a Killer's Dial returns once Kill was called.
var ErrKilled = errors.New("brokertest: the subscriber was killed")

// Killer lets an adapter's test implement Bundle.Kill for a subscriber whose
// client dials through a function the test can set: the subscriber's
// connections go through Dial, and Kill cuts them all at once and refuses
// every later one, so that the subscriber can neither ack, nor commit, nor
// leave its group, as after a crash. The zero Killer is ready to use.
type Killer struct {
	mu     sync.Mutex
	killed bool
	conns  []net.Conn
}

// Dial opens a connection with dial and remembers it, or returns ErrKilled
// once Kill was called.
func (k *Killer) Dial(dial func() (net.Conn, error)) (net.Conn, error) {
	if k.Killed() {
		return nil, ErrKilled
	}
	c, err := dial()
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.killed {
		_ = c.Close()
		return nil, ErrKilled
	}
	k.conns = append(k.conns, c)
	return c, nil
}

// Kill closes every connection Dial opened and makes Dial refuse from now on.
func (k *Killer) Kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.killed = true
	for _, c := range k.conns {
		_ = c.Close()
	}
	k.conns = nil
}

// Killed reports whether Kill was called.
func (k *Killer) Killed() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.killed
}

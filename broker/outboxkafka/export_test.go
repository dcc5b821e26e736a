package outboxkafka

import (
	"context"
	"errors"
	"net"
	"sync"
)

// Killable returns cfg with a dialer of its own, and a kill function that
// cuts every connection the dialer made and refuses every later one: the
// subscriber then stops as a crashed process would, without leaving its
// group, committing, or dead-lettering anything.
func Killable(cfg SubscriberConfig) (SubscriberConfig, func()) {
	k := &killer{}
	cfg.dial = k.dial
	return cfg, k.kill
}

var errKilled = errors.New("outboxkafka test: the subscriber was killed")

type killer struct {
	mu     sync.Mutex
	killed bool
	conns  []net.Conn
}

func (k *killer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	k.mu.Lock()
	killed := k.killed
	k.mu.Unlock()
	if killed {
		return nil, errKilled
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.killed {
		c.Close()
		return nil, errKilled
	}
	k.conns = append(k.conns, c)
	return c, nil
}

func (k *killer) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.killed = true
	for _, c := range k.conns {
		c.Close()
	}
}

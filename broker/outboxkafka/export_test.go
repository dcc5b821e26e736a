package outboxkafka

import (
	"context"
	"net"

	"github.com/outbox-go/outbox/brokertest"
)

// Killable returns cfg with a dialer of its own, and a kill function that
// cuts every connection the dialer made and refuses every later one: the
// subscriber then stops as a crashed process would, without leaving its
// group, committing, or dead-lettering anything.
func Killable(cfg SubscriberConfig) (SubscriberConfig, func()) {
	k := &brokertest.Killer{}
	cfg.dial = func(ctx context.Context, network, host string) (net.Conn, error) {
		return k.Dial(func() (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, network, host) })
	}
	return cfg, k.Kill
}

// Baseline is the baseline that outbox bench looks up (benchbaseline), for
// the tests of the package outboxkafka_test.
var Baseline = baseline

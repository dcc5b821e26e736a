package outboxredis

import (
	"strings"
	"testing"
	"time"
)

func TestRedeliveryConfig(t *testing.T) {
	const u = "redis://h:6379/0"
	type policy struct {
		max                 int
		delay, cap, deadAft time.Duration
	}
	resolve := func(cfg SubscriberConfig) (policy, error) {
		cfg.Group, cfg.Topic = "g", "t"
		c, _, err := cfg.resolve()
		return policy{c.MaxDeliveries, c.RedeliveryDelay, c.RedeliveryDelayMax, c.DeadLetterAfter}, err
	}
	p, err := resolve(SubscriberConfig{URL: u})
	if want := (policy{5, time.Second, time.Minute, 10 * time.Minute}); err != nil || p != want {
		t.Errorf("defaults: %+v %v, want %+v", p, err, want)
	}
	p, err = resolve(SubscriberConfig{URL: u + "?max_deliveries=3&redelivery_delay=2s&redelivery_delay_max=30s&dead_letter_after=5m"})
	if want := (policy{3, 2 * time.Second, 30 * time.Second, 5 * time.Minute}); err != nil || p != want {
		t.Errorf("from the URL: %+v %v, want %+v", p, err, want)
	}
	p, err = resolve(SubscriberConfig{URL: u + "?dead_letter_after=5m&redelivery_delay=2m", DeadLetterAfter: -1})
	if err != nil || p.cap != 2*time.Minute || p.deadAft != -1 {
		t.Errorf("fields over the URL: %+v %v", p, err)
	}
	for _, tc := range []struct {
		cfg  SubscriberConfig
		want string
	}{
		{SubscriberConfig{URL: u, RedeliveryDelay: time.Minute, RedeliveryDelayMax: time.Second}, "SubscriberConfig.RedeliveryDelayMax (1s) is less than SubscriberConfig.RedeliveryDelay"},
		{SubscriberConfig{URL: u, RedeliveryDelay: -time.Second}, "SubscriberConfig.RedeliveryDelay is -1s"},
		{SubscriberConfig{URL: u + "?dead_letter_after=soon"}, "dead_letter_after"},
	} {
		if _, err := resolve(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.cfg, err, tc.want)
		}
	}
}

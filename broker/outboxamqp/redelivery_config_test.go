package outboxamqp

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/internal/redelivery"
)

func TestRedeliveryConfig(t *testing.T) {
	policy := func(cfg SubscriberConfig) (redelivery.Policy, error) {
		cfg.Group = "g"
		s, err := cfg.settings()
		if err != nil {
			return redelivery.Policy{}, err
		}
		return s.redelivery, nil
	}
	const u = "amqp://guest:guest@h:5672/"
	p, err := policy(SubscriberConfig{URL: u})
	if want := (redelivery.Policy{MaxDeliveries: 5, Delay: time.Second, DelayMax: time.Minute, DeadLetterAfter: 10 * time.Minute}); err != nil || p != want {
		t.Errorf("defaults: %+v %v, want %+v", p, err, want)
	}
	p, err = policy(SubscriberConfig{URL: u + "?max_deliveries=3&redelivery_delay=2s&redelivery_delay_max=30s&dead_letter_after=5m"})
	if want := (redelivery.Policy{MaxDeliveries: 3, Delay: 2 * time.Second, DelayMax: 30 * time.Second, DeadLetterAfter: 5 * time.Minute}); err != nil || p != want {
		t.Errorf("from the URL: %+v %v, want %+v", p, err, want)
	}
	p, err = policy(SubscriberConfig{URL: u + "?dead_letter_after=5m&redelivery_delay=2m", DeadLetterAfter: -1})
	if err != nil || p.DelayMax != 2*time.Minute || p.DeadLetterAfter != -1 {
		t.Errorf("fields over the URL: %+v %v", p, err)
	}
	for _, tc := range []struct {
		cfg  SubscriberConfig
		want string
	}{
		{SubscriberConfig{URL: u, RedeliveryDelay: time.Minute, RedeliveryDelayMax: time.Second}, "RedeliveryDelayMax (redelivery_delay_max) (1s) is less than RedeliveryDelay"},
		{SubscriberConfig{URL: u, RedeliveryDelay: -time.Second}, "redelivery_delay is -1s"},
		{SubscriberConfig{URL: u + "?dead_letter_after=soon"}, "dead_letter_after"},
	} {
		if _, err := policy(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.cfg, err, tc.want)
		}
	}
}

package outboxkafka

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/internal/redelivery"
)

func TestRedeliveryConfig(t *testing.T) {
	policy := func(cfg SubscriberConfig) (redelivery.Policy, error) {
		cfg.Group, cfg.Topics = "g", []string{"t"}
		_, s, err := newSubscriberConfig(cfg)
		if err != nil {
			return redelivery.Policy{}, err
		}
		return s.redelivery, nil
	}
	p, err := policy(SubscriberConfig{URL: "kafka://h:9092"})
	if want := (redelivery.Policy{MaxDeliveries: 5, Delay: time.Second, DelayMax: time.Minute, DeadLetterAfter: 10 * time.Minute}); err != nil || p != want {
		t.Errorf("defaults: %+v %v, want %+v", p, err, want)
	}
	p, err = policy(SubscriberConfig{URL: "kafka://h:9092?max_deliveries=3&redelivery_delay=2s&redelivery_delay_max=30s&dead_letter_after=5m"})
	if want := (redelivery.Policy{MaxDeliveries: 3, Delay: 2 * time.Second, DelayMax: 30 * time.Second, DeadLetterAfter: 5 * time.Minute}); err != nil || p != want {
		t.Errorf("from the URL: %+v %v, want %+v", p, err, want)
	}
	p, err = policy(SubscriberConfig{URL: "kafka://h:9092?redelivery_delay=2m", DeadLetterAfter: -1})
	if err != nil || p.Delay != 2*time.Minute || p.DelayMax != 2*time.Minute || p.DeadLetterAfter != -1 {
		t.Errorf("fields over the URL: %+v %v", p, err)
	}
	for _, tc := range []struct {
		cfg  SubscriberConfig
		want string
	}{
		{SubscriberConfig{URL: "kafka://h:9092", RedeliveryDelay: time.Minute, RedeliveryDelayMax: time.Second}, "RedeliveryDelayMax (redelivery_delay_max) (1s) is less than RedeliveryDelay"},
		{SubscriberConfig{URL: "kafka://h:9092", RedeliveryDelay: -time.Second}, "RedeliveryDelay (redelivery_delay) is -1s"},
		{SubscriberConfig{URL: "kafka://h:9092?dead_letter_after=soon"}, "dead_letter_after"},
	} {
		if _, err := policy(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.cfg, err, tc.want)
		}
	}
}

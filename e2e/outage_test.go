package e2e

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
	"github.com/outbox-go/outbox/broker/outboxkafka"
)

// An outage is the broker down, or refusing every message, for longer than
// a message's retries last (faultMaxRetries attempts at most faultRetryMax
// apart), and shorter than the relay's RetryBudget: no message may end
// DEAD, every one must be delivered once the broker is back, and the relay
// must resume within about ProbeInterval (and the client's reconnection) of
// its return.
const (
	outageSpan   = 5 * time.Second
	outageBudget = 20 * time.Second
	// outageResume bounds the relay's first SENT after the broker's return.
	outageResume = faultProbeInterval + 15*time.Second
)

// outageCase is one transport and the way it goes down.
type outageCase struct {
	name  string
	topic string
	pub   func(t *testing.T) outbox.Publisher
	// listen starts reading what the transport delivers into a.
	listen func(t *testing.T, a *arrivals)
	// down takes the broker away, or makes it refuse everything; up
	// brings it back.
	down, up func(t *testing.T)
}

func runOutage(t *testing.T, oc outageCase) {
	if outageSpan <= faultMaxRetries*faultRetryMax || outageBudget <= outageSpan {
		t.Fatalf("the outage (%s) must outlast the retries (%d × %s) and be shorter than the budget (%s)", outageSpan, faultMaxRetries, faultRetryMax, outageBudget)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := faultHarness(ctx, t, "outage_"+oc.name)
	a := newArrivals()
	oc.listen(t, a)
	prefix := "outage-" + oc.name

	ids := writeMessages(ctx, t, h, oc.topic, prefix, 0, 50)
	faultRelay(t, h, oc.pub(t), outageBudget)
	a.waitAll(t, ids, 30*time.Second, oc.name+": the messages before the outage")

	oc.down(t)
	downAt := time.Now()
	for i := 50; i < 150; i += 10 {
		ids = append(ids, writeMessages(ctx, t, h, oc.topic, prefix, i, 10)...)
		time.Sleep(outageSpan / 20)
	}
	time.Sleep(time.Until(downAt.Add(outageSpan)))
	pending := countStatus(ctx, t, h, 0)
	if pending < 100 {
		t.Fatalf("%s: only %d of the 100 messages written during the outage are still NEW at its end: the broker was not down", oc.name, pending)
	}
	sent := countStatus(ctx, t, h, 1)
	oc.up(t)
	upAt := time.Now()
	for countStatus(ctx, t, h, 1) == sent {
		if time.Since(upAt) > outageResume {
			t.Fatalf("%s: the relay sent nothing within %s of the broker's return", oc.name, outageResume)
		}
		time.Sleep(10 * time.Millisecond)
	}
	resumed := time.Since(upAt)
	a.waitAll(t, ids, time.Minute, oc.name+": the messages after the outage")
	if n := countStatus(ctx, t, h, 2); n != 0 {
		t.Errorf("%s: %d messages DEAD after an outage of %s, shorter than the retry budget (%s)", oc.name, n, outageSpan, outageBudget)
	}
	var maxRetries int
	if err := h.pool.QueryRow(ctx, `SELECT coalesce(max(retries), 0) FROM outbox`).Scan(&maxRetries); err != nil {
		t.Fatal(err)
	}
	// Charged at every attempt, a message would have spent some
	// outageSpan/faultRetryMax retries; the relay spends none while the
	// broker is down.
	if maxRetries > faultMaxRetries {
		t.Errorf("%s: a message spent %d retries during the outage (MaxRetries %d): the relay charged the outage to the messages", oc.name, maxRetries, faultMaxRetries)
	}
	t.Logf("%s: broker down %s; the relay resumed %s after its return (ProbeInterval %s); %d messages delivered, 0 DEAD, at most %d retries spent by a message",
		oc.name, upAt.Sub(downAt).Round(time.Millisecond), resumed.Round(time.Millisecond), faultProbeInterval, len(ids), maxRetries)
}

// proxiedOutage is an outage of a broker at addr that the relay reaches
// through a proxy of the test's, which drops every connection while the
// broker is "down"; url builds the broker's URL for an address, and b is
// the Broker of a URL.
func proxiedOutage(t *testing.T, name, addr string, url func(addr string) string, b func(url string) Broker) outageCase {
	t.Helper()
	p := startProxy(t, addr)
	direct, proxied := b(url(addr)), b(url(p.addr()))
	return outageCase{name: name, topic: direct.Topic, pub: proxied.NewPublisher, listen: brokerReceiver(direct),
		down: func(*testing.T) { p.kill() }, up: func(*testing.T) { p.heal() }}
}

// TestOutageNATS: a private nats-server out of the relay's reach.
func TestOutageNATS(t *testing.T) {
	srv := startPrivate(t, natsSpec)
	runOutage(t, proxiedOutage(t, "nats", srv.addr(),
		func(addr string) string { return "nats://" + addr + "?stream=OUTAGE&subject=outage.{topic}&timeout=2s" }, natsBroker))
}

// TestOutageRedis: a private redis-server out of the relay's reach.
func TestOutageRedis(t *testing.T) {
	srv := startPrivate(t, redisSpec)
	runOutage(t, proxiedOutage(t, "redis", srv.addr(),
		func(addr string) string { return "redis://" + addr + "/0?stream=outage:{topic}&minidle=200ms" }, redisBroker))
}

// TestOutageMQTT: a private mosquitto out of the relay's reach.
func TestOutageMQTT(t *testing.T) {
	srv := startPrivate(t, mosquittoSpec)
	runOutage(t, proxiedOutage(t, "mqtt", srv.addr(),
		func(addr string) string { return "mqtt://" + addr + "?topic=outage/{topic}" }, mqttBroker))
}

// TestOutageAMQP: the machine's RabbitMQ out of the relay's reach, on an
// exchange of the test's own.
func TestOutageAMQP(t *testing.T) {
	exchange := "e2e-outage-" + randomHex(4)
	base := amqpURL()
	host := strings.TrimSuffix(base[strings.Index(base, "@")+1:], "/")
	oc := proxiedOutage(t, "amqp", host, func(addr string) string {
		return strings.Replace(base, host, addr, 1) + "?exchange=" + exchange + "&reconnect_delay=200ms"
	}, amqpBroker)
	b := amqpBroker(base + "?exchange=" + exchange + "&reconnect_delay=200ms")
	oc.listen = func(t *testing.T, a *arrivals) {
		sub := b.NewSubscriber(t, "faults").(*outboxamqp.Subscriber)
		runSubscriber(t, b.Name, sub, a)
		t.Cleanup(func() { deleteAMQP(t, sub.Queue(), exchange) })
	}
	runOutage(t, oc)
}

// TestOutageKafka: a kfake cluster stopped, and started again on the same
// ports and data.
func TestOutageKafka(t *testing.T) {
	kc := startKafkaCluster(t)
	const topic = "transfer.done"
	u := kc.url() + "?topic=outage.{topic}&timeout=5s"
	kc.createTopic(t, "outage."+topic, 4)
	runOutage(t, outageCase{name: "kafka", topic: topic,
		pub: func(t *testing.T) outbox.Publisher {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := outboxkafka.NewPublisher(ctx, outboxkafka.PublisherConfig{URL: u})
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			return p
		},
		listen: func(t *testing.T, a *arrivals) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := outboxkafka.NewSubscriber(ctx, outboxkafka.SubscriberConfig{URL: u, Group: "faults", Topics: []string{topic},
				RetryBackoff: 50 * time.Millisecond})
			if err != nil {
				t.Fatalf("NewSubscriber: %v", err)
			}
			runSubscriber(t, "kafka", s, a)
		},
		down: func(*testing.T) { kc.stop() },
		up:   func(t *testing.T) { kc.start(t) },
	})
}

// TestOutageWebhook: the receiver answers 500 to every message for the
// span, a refusal rather than an unreachable endpoint.
func TestOutageWebhook(t *testing.T) {
	var refusing atomic.Bool
	var a atomic.Pointer[arrivals]
	recv := webhookReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) bool {
		if refusing.Load() {
			http.Error(w, "refusing for the test", http.StatusInternalServerError)
			return true
		}
		return false
	}, a.Load)
	runOutage(t, outageCase{name: "webhook", topic: "transfer.done",
		pub:    func(t *testing.T) outbox.Publisher { return newWebhook(t, recv.URL) },
		listen: func(_ *testing.T, got *arrivals) { a.Store(got) },
		down:   func(*testing.T) { refusing.Store(true) },
		up:     func(*testing.T) { refusing.Store(false) },
	})
}

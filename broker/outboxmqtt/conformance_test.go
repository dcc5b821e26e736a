package outboxmqtt

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/brokertest"
)

func TestConformance(t *testing.T) {
	requireBroker(t, "127.0.0.1:1883")
	brokertest.Run(t, brokertest.Env{
		Features: brokertest.Features{
			// One publisher sends a key's messages in order, mosquitto
			// keeps the order per topic and connection, and a member
			// handles its messages one at a time.
			Ordered: true,
			// MQTT has no deduplication.
			Dedup:       false,
			DeadLetter:  true,
			SharedGroup: true,
			// A message a member received and did not ack stays in that
			// member's persistent session, for the subscriber that resumes
			// it (env.subscriber hands the name of a member whose Run
			// returned to the next subscriber of its group). The adapter
			// promises that much (Run's doc), not that another member gets it.
			HandOver: false,
		},
		Setup: func(t *testing.T) *brokertest.Bundle { return newEnv(t, sharedURL).bundle() },
	})
}

func TestBackoff(t *testing.T) {
	requireBroker(t, "127.0.0.1:1883")
	var envs sync.Map // *brokertest.Bundle -> *env
	brokertest.RunBackoff(t, brokertest.BackoffEnv{
		Setup: func(t *testing.T) *brokertest.Bundle {
			e := newEnv(t, sharedURL)
			b := e.bundle()
			envs.Store(b, e)
			return b
		},
		NewSubscriber: func(t *testing.T, b *brokertest.Bundle, o brokertest.BackoffOptions) brokertest.Subscriber {
			e, _ := envs.Load(b)
			return e.(*env).subscriberWith(t, o)
		},
	})
}

// env is one test's view of the adapter on a broker, with topics of its own.
type env struct {
	t   *testing.T
	url string
	id  string
	pub *Publisher

	mu    sync.Mutex
	free  map[string][]string // group -> member names whose Run has returned
	count map[string]int      // group -> member names handed out
	dead  map[string]*collector
}

func newEnv(t *testing.T, url string) *env {
	t.Helper()
	e := &env{
		t:     t,
		url:   url,
		id:    strings.NewReplacer("/", ".", "#", "", "+", "").Replace(t.Name()) + "-" + randomHex(3),
		free:  map[string][]string{},
		count: map[string]int{},
		dead:  map[string]*collector{},
	}
	pub, err := NewPublisher(testCtx(t, 10*time.Second), PublisherConfig{URL: url})
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	e.pub = pub
	return e
}

func (e *env) topic() string { return "bt." + e.id }

func (e *env) deadTopic(group string) string { return "outbox/dead/" + e.id + "/" + group }

func (e *env) bundle() *brokertest.Bundle {
	return &brokertest.Bundle{
		Publisher: e.pub,
		Topic:     e.topic(),
		NewSubscriber: func(t *testing.T, opts brokertest.SubscriberOptions) brokertest.Subscriber {
			return e.subscriber(t, opts.Group, opts.MaxDeliveries)
		},
		Unreachable: func(t *testing.T) outbox.Publisher {
			// A publisher that connected to a broker which then went away.
			m := startMosquitto(t, "")
			pub, err := NewPublisher(testCtx(t, 10*time.Second), PublisherConfig{URL: m.URL()})
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			t.Cleanup(func() { _ = pub.Close() })
			m.Stop()
			return pub
		},
		// A row topic with an MQTT wildcard cannot be a topic name: the
		// publisher refuses it without sending (the broker would close the
		// connection). The broker's own refusals (PUBACK 0x95) are tested
		// on a private broker in TestBrokerRefusal.
		Refused: func() outbox.Message {
			return outbox.Message{MsgID: "refused-1", Topic: e.topic() + ".+", Payload: []byte(`{}`)}
		},
		// Rows a program inserted by SQL, which MQTT cannot carry: Mosquitto
		// closes the connection on a control character or a noncharacter in
		// a UTF-8 string ("Malformed UTF-8"), and a string has at most
		// 65,535 bytes.
		Undeliverable: func() []outbox.Message {
			topic := e.topic()
			return []outbox.Message{
				{MsgID: "tab\tin-id", Topic: topic, Payload: []byte(`{}`)},
				{MsgID: "crlf-header", Topic: topic, Payload: []byte(`{}`), Headers: map[string]string{"tenant": "eu1\r\nx"}},
				{MsgID: "ctl-topic", Topic: topic + "\x01", Payload: []byte(`{}`)},
				{MsgID: "nonchar-key", Topic: topic, Key: "k\uFFFF", Payload: []byte(`{}`)},
				{MsgID: "long-header", Topic: topic, Payload: []byte(`{}`), Headers: map[string]string{"big": strings.Repeat("x", 70000)}},
			}
		},
		// A crash: Run's connection is cut and no other can be made, so
		// nothing is acked and the member's session keeps what it held;
		// its name goes to the next subscriber of the group, as to a
		// restarted process, which resumes the session.
		Kill: func(sub brokertest.Subscriber) {
			ts := sub.(*testSubscriber)
			ts.kill()
			ts.release()
		},
		DeadLetters: func(_ context.Context, group string) ([]outbox.Message, error) {
			e.mu.Lock()
			c := e.dead[group]
			e.mu.Unlock()
			if c == nil {
				return nil, fmt.Errorf("no subscriber of group %q was made, so nothing watches its dead-letter topic", group)
			}
			return c.messages(), nil
		},
	}
}

// subscriber returns a member of group. A member whose Run has returned
// lends its name (and so its session) to the next subscriber of the group,
// as a restarted process would.
func (e *env) subscriber(t *testing.T, group string, maxDeliveries int) *testSubscriber {
	t.Helper()
	// Short delays, and dead-lettering at the MaxDeliveries-th failure.
	return e.subscriberWith(t, brokertest.BackoffOptions{Group: group, MaxDeliveries: maxDeliveries,
		RedeliveryDelay: 10 * time.Millisecond, RedeliveryDelayMax: 100 * time.Millisecond, DeadLetterAfter: time.Millisecond})
}

// subscriberWith is subscriber with the redelivery settings of o.
func (e *env) subscriberWith(t *testing.T, o brokertest.BackoffOptions) *testSubscriber {
	t.Helper()
	group := o.Group
	e.mu.Lock()
	if e.dead[group] == nil {
		e.dead[group] = watch(t, e.url, e.deadTopic(group))
	}
	var name string
	if free := e.free[group]; len(free) > 0 {
		name, e.free[group] = free[0], free[1:]
	} else {
		e.count[group]++
		name = fmt.Sprintf("%s-%d", e.id, e.count[group])
	}
	e.mu.Unlock()
	sub, err := NewSubscriber(testCtx(t, 10*time.Second), SubscriberConfig{
		URL:                e.url,
		Group:              group,
		Name:               name,
		Topic:              e.topic(),
		MaxDeliveries:      o.MaxDeliveries,
		RedeliveryDelay:    o.RedeliveryDelay,
		RedeliveryDelayMax: o.RedeliveryDelayMax,
		DeadLetterAfter:    o.DeadLetterAfter,
		DeadLetterTopic:    e.deadTopic("{group}"),
		SessionExpiry:      10 * time.Minute,
	})
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	k := &brokertest.Killer{}
	sub.attempt = func(ctx context.Context, cfg autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
		return k.Dial(func() (net.Conn, error) { return dialBroker(ctx, cfg, u) })
	}
	t.Cleanup(func() {
		_ = sub.Close()
		if k.Killed() {
			return // its session now belongs to the subscriber that took its name
		}
		if err := sub.Leave(testCtx(t, 10*time.Second)); err != nil {
			t.Errorf("Leave: %v", err)
		}
	})
	return &testSubscriber{Subscriber: sub, kill: k.Kill, release: sync.OnceFunc(func() {
		e.mu.Lock()
		e.free[group] = append(e.free[group], name)
		e.mu.Unlock()
	})}
}

type testSubscriber struct {
	*Subscriber
	kill    func()
	release func() // lends the member's name to the next subscriber; once
}

func (s *testSubscriber) Run(ctx context.Context, h outbox.Handler) error {
	defer s.release()
	return s.Subscriber.Run(ctx, h)
}

// collector subscribes to a topic and keeps what arrives, decoded.
type collector struct {
	mu   sync.Mutex
	msgs []outbox.Message    // those that decode as outbox events
	raws []map[string]string // the attributes of every message
}

func (c *collector) raw() []map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]map[string]string(nil), c.raws...)
}

func (c *collector) messages() []outbox.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]outbox.Message(nil), c.msgs...)
}

// watch subscribes to topic until the end of the test.
func watch(t *testing.T, rawURL, topic string) *collector {
	t.Helper()
	c := &collector{}
	b, err := parseURL(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := dial(testCtx(t, 10*time.Second), connOptions{
		url: b, clientID: "watch-" + randomHex(6), keepAlive: 30 * time.Second,
		connectTimeout: 10 * time.Second, packetTimeout: 10 * time.Second, cleanStart: true,
		onPublish: func(pr paho.PublishReceived) (bool, error) {
			m, err := Decode(pr.Packet)
			c.mu.Lock()
			if err == nil {
				c.msgs = append(c.msgs, m)
			}
			c.raws = append(c.raws, attributes(pr.Packet))
			c.mu.Unlock()
			return true, nil
		},
	})
	if err != nil {
		t.Fatalf("watching %s: %v", topic, err)
	}
	t.Cleanup(func() { disconnect(cm) })
	subscribeOrFail(t, cm, topic)
	return c
}

func subscribeOrFail(t *testing.T, cm *autopaho.ConnectionManager, topic string) {
	t.Helper()
	if _, err := cm.Subscribe(testCtx(t, 10*time.Second), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}}); err != nil {
		t.Fatalf("subscribing to %s: %v", topic, err)
	}
}

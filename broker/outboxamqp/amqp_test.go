package outboxamqp_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
	"github.com/outbox-go/outbox/brokertest"
)

// brokerURL is the machine's shared RabbitMQ; OUTBOX_AMQP_URL overrides it.
var brokerURL = "amqp://guest:guest@127.0.0.1:5672/"

func TestMain(m *testing.M) {
	if u := os.Getenv("OUTBOX_AMQP_URL"); u != "" {
		brokerURL = u
	}
	goleak.VerifyTestMain(m)
}

// admin opens a connection for a test's own set-up and clean-up; it fails
// the test loudly when the broker is not there.
func admin(t testing.TB) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(brokerURL)
	if err != nil {
		t.Fatalf("RabbitMQ at %s is not reachable (start it: service rabbitmq-server start): %v", brokerURL, err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func name(prefix string) string { return fmt.Sprintf("%s-%08x", prefix, rand.Uint32()) }

func TestConformance(t *testing.T) {
	admin(t) // fail at once, not in every subtest, when the broker is missing
	brokertest.Run(t, brokertest.Env{
		Features: brokertest.Features{
			// One subscriber handles one message at a time, and a quorum
			// queue delivers in queue order; only a requeue after a failure
			// (or a reconnect) can reorder.
			Ordered:     true,
			Dedup:       false,
			DeadLetter:  true,
			SharedGroup: true,
			// A message unacked when its channel closes is requeued for
			// the queue's other consumers.
			HandOver: true,
		},
		Setup: setup,
	})
}

// setup builds a Bundle on an exchange and queues of its own, deleted at the
// end of the test.
func setup(t *testing.T) *brokertest.Bundle {
	exchange := name("outboxtest")
	topic := name("topic")
	ctx := context.Background()
	pub, err := outboxamqp.NewPublisher(ctx, outboxamqp.PublisherConfig{URL: brokerURL, Exchange: exchange})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var queues []string
	t.Cleanup(func() {
		pub.Close()
		ch := admin(t)
		mu.Lock()
		defer mu.Unlock()
		for _, q := range queues {
			ch.QueueDelete(q, false, false, false)
		}
		ch.ExchangeDelete(exchange, false, false)
	})
	queue := func(group string) string { return exchange + "." + group }
	subscribe := func(t *testing.T, o brokertest.BackoffOptions) brokertest.Subscriber {
		sub, err := outboxamqp.NewSubscriber(ctx, outboxamqp.SubscriberConfig{
			URL:                brokerURL,
			Group:              o.Group,
			MaxDeliveries:      o.MaxDeliveries,
			RedeliveryDelay:    o.RedeliveryDelay,
			RedeliveryDelayMax: o.RedeliveryDelayMax,
			DeadLetterAfter:    o.DeadLetterAfter,
			Exchange:           exchange,
			Queue:              queue(o.Group),
			BindingKey:         topic,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Close() })
		mu.Lock()
		queues = append(queues, sub.Queue(), sub.DeadLetterQueue())
		mu.Unlock()
		return sub
	}
	b := &brokertest.Bundle{
		Publisher: pub,
		Topic:     topic,
		NewSubscriber: func(t *testing.T, opts brokertest.SubscriberOptions) brokertest.Subscriber {
			// Short delays, and the dead-letter queue at the
			// MaxDeliveries-th failure.
			return subscribe(t, brokertest.BackoffOptions{Group: opts.Group, MaxDeliveries: opts.MaxDeliveries,
				RedeliveryDelay: 10 * time.Millisecond, RedeliveryDelayMax: 100 * time.Millisecond, DeadLetterAfter: time.Millisecond})
		},
		Unreachable: func(t *testing.T) outbox.Publisher {
			// NewPublisher needs a broker, so connect through a proxy and
			// then take the proxy away: the address no longer answers.
			p := startProxy(t, "127.0.0.1:5672")
			u := fmt.Sprintf("amqp://guest:guest@%s/", p.addr)
			up, err := outboxamqp.NewPublisher(ctx, outboxamqp.PublisherConfig{URL: u, Exchange: exchange})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { up.Close() })
			p.close()
			return up
		},
		// Close closes the subscriber's connections at once, handler or
		// not: the broker requeues what it had not acked.
		Kill: func(sub brokertest.Subscriber) { sub.(*outboxamqp.Subscriber).Close() },
		Refused: func() outbox.Message {
			return outbox.Message{MsgID: name("unroutable"), Topic: name("nobody.listens"), Payload: []byte(`{}`)}
		},
		Undeliverable: func() []outbox.Message {
			return []outbox.Message{
				// 64 characters of four bytes: a 256-byte message-id.
				{MsgID: strings.Repeat("\U0001F600", 64), Topic: topic, Payload: []byte(`{}`)},
				// 128 characters of two bytes: a 256-byte type and routing key.
				{MsgID: name("long-topic"), Topic: strings.Repeat("é", 128), Payload: []byte(`{}`)},
				// A header value past RabbitMQ's frame_max of 131072 bytes.
				{MsgID: name("big-header"), Topic: topic, Payload: []byte(`{}`), Headers: map[string]string{"big": strings.Repeat("x", 200<<10)}},
				// A header name that makes a 262-byte table key with its prefix.
				{MsgID: name("long-name"), Topic: topic, Payload: []byte(`{}`), Headers: map[string]string{strings.Repeat("h", 250): "v"}},
			}
		},
		DeadLetters: func(ctx context.Context, group string) ([]outbox.Message, error) {
			return deadLetters(t, queue(group)+".dead")
		},
	}
	subscribers.Store(b, subscribe)
	return b
}

// subscribers maps each Bundle of setup to its subscriber constructor.
var subscribers sync.Map // *brokertest.Bundle -> func(*testing.T, brokertest.BackoffOptions) brokertest.Subscriber

func TestBackoff(t *testing.T) {
	brokertest.RunBackoff(t, brokertest.BackoffEnv{
		Setup: setup,
		NewSubscriber: func(t *testing.T, b *brokertest.Bundle, o brokertest.BackoffOptions) brokertest.Subscriber {
			subscribe, _ := subscribers.Load(b)
			return subscribe.(func(*testing.T, brokertest.BackoffOptions) brokertest.Subscriber)(t, o)
		},
	})
}

// deadLetters reads the dead-letter queue without taking the messages: they
// are fetched unacknowledged and requeued when the channel closes.
func deadLetters(t *testing.T, queue string) ([]outbox.Message, error) {
	conn, err := amqp.Dial(brokerURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	var out []outbox.Message
	for {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		id, _ := d.Headers[outboxamqp.AttributePrefix+"id"].(string)
		out = append(out, outbox.Message{MsgID: id, Payload: d.Body})
	}
}

// proxy forwards TCP connections to a target until closed.
type proxy struct {
	addr  string
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startProxy(t *testing.T, target string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: l.Addr().String(), l: l}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(u, c); u.Close() }()
			go func() { defer p.wg.Done(); io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(p.close)
	return p
}

// close stops listening and cuts every connection.
func (p *proxy) close() {
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

var _ = time.Second

// Baseline publishes the Publisher's message (the CloudEvents attributes as
// headers, message-id, persistent), each with its own id, so that the
// relay's ratio to it compares the same messages.
func TestBaselineSendsThePublishersMessage(t *testing.T) {
	t.Parallel()
	ch := admin(t)
	exchange, queue := name("outboxtest-baseline"), name("outboxtest-baseline")
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		_ = ch.ExchangeDelete(exchange, false, false)
	})
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, "#", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := outboxamqp.Baseline(ctx, brokerURL+"?exchange="+exchange, "bench.event", 20, 200, 10); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for range 20 {
		d, ok, err := ch.Get(queue, true)
		if err != nil || !ok {
			t.Fatalf("get: %v, %v", ok, err)
		}
		h := func(a string) string { s, _ := d.Headers[outboxamqp.AttributePrefix+a].(string); return s }
		if h("type") != "bench.event" || h("specversion") != "1.0" || h("source") != "/outbox" || h("time") == "" ||
			h("id") != d.MessageId || d.DeliveryMode != amqp.Persistent || d.ContentType != "application/json" || len(d.Body) != 200 {
			t.Fatalf("a baseline message: %+v", d)
		}
		ids[d.MessageId] = true
	}
	if len(ids) != 20 {
		t.Errorf("%d distinct ids in 20 messages", len(ids))
	}
}

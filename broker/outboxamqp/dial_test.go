package outboxamqp_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
	"github.com/outbox-go/outbox/broker/outboxamqp/rabbittest"
)

// dialer is a Dial hook with a connection name and heartbeat of the
// caller's, which counts its calls and keeps the connections it returned.
type dialer struct {
	url, name string

	mu    sync.Mutex
	conns []*amqp.Connection
}

func (d *dialer) dial(ctx context.Context) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(d.name)
	conn, err := amqp.DialConfig(d.url, amqp.Config{
		Properties: props,
		Heartbeat:  5 * time.Second,
		Dial: func(network, addr string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, network, addr)
		},
	})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.conns = append(d.conns, conn)
	d.mu.Unlock()
	return conn, nil
}

// calls is how many connections the hook returned.
func (d *dialer) calls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

// closeLast closes the last connection the hook returned, from the client's
// side, as a caller could.
func (d *dialer) closeLast(t *testing.T) {
	d.mu.Lock()
	c := d.conns[len(d.conns)-1]
	d.mu.Unlock()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// allClosed reports whether every connection the hook returned is closed.
func (d *dialer) allClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		if !c.IsClosed() {
			return false
		}
	}
	return true
}

// dialRig is a publisher and a running subscriber whose connections come
// from Dial hooks.
type dialRig struct {
	pub         *outboxamqp.Publisher
	sub         *outboxamqp.Subscriber
	pubD, subD  *dialer
	topic       string
	mu          sync.Mutex
	seen        map[string]bool
	stop        context.CancelFunc
	done        chan error
	exch, queue string
}

func startDialRig(t *testing.T, url string) *dialRig {
	t.Helper()
	ctx := context.Background()
	r := &dialRig{
		pubD: &dialer{url: url, name: "outboxtest dial publisher"}, subD: &dialer{url: url, name: "outboxtest dial subscriber"},
		topic: name("dial"), seen: map[string]bool{}, exch: name("outboxtest-dial"), done: make(chan error, 1),
	}
	r.queue = r.exch + ".q"
	var err error
	// The URL holds only query parameters; the fields win over them.
	r.pub, err = outboxamqp.NewPublisher(ctx, outboxamqp.PublisherConfig{URL: "?exchange=" + r.exch + "&routing_key=wrong", RoutingKey: "{topic}", Dial: r.pubD.dial})
	if err != nil {
		t.Fatal(err)
	}
	r.sub, err = outboxamqp.NewSubscriber(ctx, outboxamqp.SubscriberConfig{Group: "dial", Exchange: r.exch, Queue: r.queue,
		BindingKey: r.topic, ReconnectDelay: 500 * time.Millisecond, Dial: r.subD.dial})
	if err != nil {
		r.pub.Close()
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	r.stop = stop
	go func() {
		r.done <- r.sub.Run(runCtx, func(_ context.Context, m outbox.Message) error {
			r.mu.Lock()
			r.seen[m.MsgID] = true
			r.mu.Unlock()
			return nil
		})
	}()
	return r
}

// roundTrip publishes a batch, again while Publish reports outbox.Unavailable
// (the publisher reconnects on the next call), and waits until the handler
// has seen every message.
func (r *dialRig) roundTrip(t *testing.T, prefix string) {
	t.Helper()
	msgs := make([]outbox.Message, 10)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("%s-%s-%d", r.exch, prefix, i), Topic: r.topic, Key: fmt.Sprint(i % 3), Payload: []byte(`{"n":1}`)}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		errs := r.pub.Publish(context.Background(), msgs)
		if errs == nil {
			break
		}
		for _, err := range errs {
			if err != nil && !outbox.IsUnavailable(err) {
				t.Fatalf("Publish %s: %v, want nil or outbox.Unavailable", prefix, err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Publish %s still fails: %v", prefix, errs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		r.mu.Lock()
		missing := 0
		for _, m := range msgs {
			if !r.seen[m.MsgID] {
				missing++
			}
		}
		r.mu.Unlock()
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d messages never reached the handler", prefix, missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// close stops Run and closes both; every connection Dial returned must be
// closed then.
func (r *dialRig) close(t *testing.T) {
	t.Helper()
	r.stop()
	if err := <-r.done; err != nil {
		t.Errorf("Run returned %v after its context ended", err)
	}
	r.sub.Close()
	r.pub.Close()
	if !r.pubD.allClosed() || !r.subD.allClosed() {
		t.Error("a connection from Dial is still open after Close")
	}
}

// waitCalls waits until the hook has returned at least n connections.
func waitCalls(t *testing.T, d *dialer, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); d.calls() < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: Dial returned %d connections, want at least %d", d.name, d.calls(), n)
		}
	}
}

// TestDial runs a publisher and a subscriber on connections of the caller's
// through Dial: messages round-trip, and after their connections are closed
// the adapters call Dial again and go on.
func TestDial(t *testing.T) {
	admin(t)
	r := startDialRig(t, brokerURL)
	t.Cleanup(func() {
		ch := admin(t)
		ch.QueueDelete(r.queue, false, false, false)
		ch.QueueDelete(r.queue+".dead", false, false, false)
		ch.ExchangeDelete(r.exch, false, false)
	})
	defer r.close(t)
	r.roundTrip(t, "first")
	// NewSubscriber's connection, then Run's.
	if p, s := r.pubD.calls(), r.subD.calls(); p != 1 || s != 2 {
		t.Fatalf("Dial calls: publisher %d, subscriber %d; want 1 and 2", p, s)
	}
	r.pubD.closeLast(t)
	r.subD.closeLast(t)
	waitCalls(t, r.subD, 3)
	r.roundTrip(t, "second")
	waitCalls(t, r.pubD, 2)
}

// TestDialServerClose has a private RabbitMQ node close every connection
// (connection.close from the server, 320 CONNECTION_FORCED): the publisher
// and the subscriber call Dial again and publishing resumes.
func TestDialServerClose(t *testing.T) {
	t.Parallel()
	node := rabbittest.Start(t)
	r := startDialRig(t, node.URL)
	defer r.close(t)
	r.roundTrip(t, "before")
	pubCalls, subCalls := r.pubD.calls(), r.subD.calls()
	node.Ctl(t, "close_all_connections", "outboxtest: closed by the server")
	waitCalls(t, r.subD, subCalls+1)
	r.roundTrip(t, "after")
	waitCalls(t, r.pubD, pubCalls+1)
}

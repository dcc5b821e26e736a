package outboxmqtt

import (
	"context"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/outbox-go/outbox"
)

// hookRecorder is a ClientConfig hook that dials the broker itself, counts
// its calls and the connections made, and tries to change what the adapter
// keeps: the client id, clean start, session expiry, the manual acks, and
// the same in the CONNECT packet; its OnConnectionDown asks to stop
// reconnecting.
type hookRecorder struct {
	mu    sync.Mutex
	calls int
	ups   int
	conns []net.Conn
}

func (h *hookRecorder) hook(cfg *autopaho.ClientConfig) {
	h.mu.Lock()
	h.calls++
	h.mu.Unlock()
	cfg.AttemptConnection = func(ctx context.Context, _ autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", u.Host)
		if err == nil {
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
		}
		return c, err
	}
	cfg.OnConnectionUp = func(*autopaho.ConnectionManager, *paho.Connack) {
		h.mu.Lock()
		h.ups++
		h.mu.Unlock()
	}
	cfg.OnConnectionDown = func() bool { return false }
	cfg.ClientID = "outboxtest-taken"
	cfg.CleanStartOnInitialConnection, cfg.SessionExpiryInterval = true, 0
	cfg.EnableManualAcknowledgment = true
	cfg.ConnectPacketBuilder = func(cp *paho.Connect, _ *url.URL) (*paho.Connect, error) {
		cp.ClientID, cp.CleanStart, cp.Properties = "outboxtest-taken", true, &paho.ConnectProperties{}
		return cp, nil
	}
}

func (h *hookRecorder) counts() (calls, ups int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls, h.ups
}

// cut closes the network connection made last.
func (h *hookRecorder) cut() {
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = h.conns[len(h.conns)-1].Close()
}

func (h *hookRecorder) waitUps(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, ups := h.counts(); ups >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hook's OnConnectionUp ran fewer than %d times", n)
		}
	}
}

// TestClientConfigKeeps checks what configure leaves to the hook and what it
// puts back.
func TestClientConfigKeeps(t *testing.T) {
	t.Parallel()
	b, err := parseURL("mqtt://127.0.0.1:1883")
	if err != nil {
		t.Fatal(err)
	}
	var adapterUps, adapterErrs int
	o := connOptions{url: b, clientID: "outbox-g-n", sessionExpiry: 3600, session: newAckSession(), packetTimeout: time.Second,
		onPublish: func(paho.PublishReceived) (bool, error) { return true, nil },
		onUp:      func(*autopaho.ConnectionManager, *paho.Connack) { adapterUps++ },
		configure: (&hookRecorder{}).hook}
	cfg := o.clientConfig(func(error) { adapterErrs++ })
	switch {
	case cfg.ClientID != "outbox-g-n", cfg.CleanStartOnInitialConnection, cfg.SessionExpiryInterval != 3600,
		cfg.EnableManualAcknowledgment, cfg.Session != o.session, cfg.PacketTimeout != time.Second, len(cfg.OnPublishReceived) != 1:
		t.Errorf("the hook changed what the adapter keeps: %+v", cfg)
	case cfg.AttemptConnection == nil || cfg.ConnectPacketBuilder == nil:
		t.Error("the hook's dialling or CONNECT builder is gone")
	}
	cfg.OnConnectionUp(nil, nil)
	cfg.OnConnectError(nil)
	if adapterUps != 1 || adapterErrs != 1 {
		t.Errorf("the adapter's callbacks ran %d and %d times, want once each", adapterUps, adapterErrs)
	}
	if !cfg.OnConnectionDown() {
		t.Error("OnConnectionDown returned false: the connection would stop reconnecting")
	}
	expiry := uint32(3600)
	cp, err := cfg.ConnectPacketBuilder(&paho.Connect{ClientID: "outbox-g-n", Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}, nil)
	if err != nil || cp.ClientID != "outbox-g-n" || cp.CleanStart || cp.Properties.SessionExpiryInterval == nil || *cp.Properties.SessionExpiryInterval != 3600 {
		t.Errorf("CONNECT after the hook's builder: %+v, %v; want the adapter's client id, no clean start, expiry 3600", cp, err)
	}
}

// TestClientConfig runs a publisher and a subscriber whose autopaho
// configuration a hook adjusts (it dials the broker itself): the member's
// session still keeps the messages published while it is away, a lost
// connection is made again although the hook's OnConnectionDown says
// stop, a message in hand when its connection is lost is not acked and
// comes again, and messages published afterwards arrive.
func TestClientConfig(t *testing.T) {
	t.Parallel()
	requireBroker(t, "127.0.0.1:1883")
	ctx := testCtx(t, time.Minute)
	topic := "clientconfig." + randomHex(6)
	ph, sh := &hookRecorder{}, &hookRecorder{}
	pub, err := NewPublisher(ctx, PublisherConfig{URL: sharedURL, ClientConfig: ph.hook})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := NewSubscriber(ctx, SubscriberConfig{URL: sharedURL, Group: "g", Name: "hook", Topic: topic,
		SessionExpiry: time.Minute, ClientConfig: sh.hook})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sub.Leave(testCtx(t, 10*time.Second)); err != nil {
			t.Errorf("Leave: %v", err)
		}
	}()
	if calls, ups := ph.counts(); calls != 1 || ups != 1 {
		t.Fatalf("publisher hook: %d calls, %d connections, want 1 and 1", calls, ups)
	}
	away := msgs(topic, "away", 10)
	publishUntilAcked(t, pub, away) // kept in the member's session

	got := &seen{ids: map[string]int{}}
	held := "held-0"
	holding, release := make(chan struct{}), make(chan struct{})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(runCtx, func(ctx context.Context, m outbox.Message) error {
			if m.MsgID == held && got.count(held) == 0 {
				close(holding)
				<-release
			}
			return got.handler(ctx, m)
		})
	}()
	got.waitAll(t, away)
	_, ups := sh.counts()

	publishUntilAcked(t, pub, msgs(topic, "held", 1))
	<-holding
	sh.cut() // the held message's connection; its ack is not sent
	sh.waitUps(t, ups+1)
	close(release)
	after := msgs(topic, "after", 10)
	publishUntilAcked(t, pub, after)
	got.waitAll(t, after)
	for deadline := time.Now().Add(30 * time.Second); got.count(held) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the message in hand when its connection was lost came %d times, want again", got.count(held))
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if calls, _ := sh.counts(); calls != 2 {
		t.Errorf("subscriber hook: %d calls, want 2 (NewSubscriber, Run)", calls)
	}
}

func (s *seen) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

// TestClientConfigServersNamed: when the hook points the connection at other
// servers than the URL's, the publisher's and subscriber's errors name
// those servers, not the URL's host.
func TestClientConfigServersNamed(t *testing.T) {
	t.Parallel()
	requireBroker(t, "127.0.0.1:1883")
	ctx := testCtx(t, 30*time.Second)
	real, err := url.Parse("mqtt://127.0.0.1:1883")
	if err != nil {
		t.Fatal(err)
	}
	hook := func(cfg *autopaho.ClientConfig) { cfg.ServerUrls = []*url.URL{real} }
	const elsewhere = "mqtt://not-used.invalid:1883"
	pub, err := NewPublisher(ctx, PublisherConfig{URL: elsewhere, ClientConfig: hook})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := NewSubscriber(ctx, SubscriberConfig{URL: elsewhere, Group: "g", Name: "named", Topic: "named." + randomHex(6), ClientConfig: hook})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Leave(testCtx(t, 10*time.Second)) }()
	if pub.redacted != real.String() || sub.name != real.String() {
		t.Errorf("errors name %q (publisher) and %q (subscriber), want the hook's server %q", pub.redacted, sub.name, real)
	}
}

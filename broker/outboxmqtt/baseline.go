package outboxmqtt

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
	"github.com/outbox-go/outbox/internal/benchbaseline"
)

// init registers baseline for `outbox bench` through mqtt://, mqtts:// URLs.
func init() {
	benchbaseline.Register("mqtt", baseline)
	benchbaseline.Register("mqtts", baseline)
}

// baseline publishes n messages of payloadBytes bytes to the destination of
// topic with the bare paho client, QoS 1, with window publishes in flight at
// once (each a blocking paho Publish in its own goroutine, since paho has no
// asynchronous publish that reports its PUBACK), waiting for every PUBACK, and
// returns how long that took. It is the broker's own acked publish rate,
// against which the relay's rate is a ratio. The URL's topic parameter sets
// the destination as for the Publisher; a PUBACK with reason 0x10 (no
// subscriber) counts as acked here. Each PUBLISH is the Publisher's (the
// CloudEvents attributes as user properties, the Content Type property),
// built once; each message only gets its own id, so that the loop measures
// the client and the broker, not the encoding.
func baseline(ctx context.Context, brokerURL, topic string, n, payloadBytes, window int) (time.Duration, error) {
	s, err := PublisherConfig{URL: brokerURL}.settings()
	if err != nil {
		return 0, err
	}
	if n < 0 || payloadBytes < 0 || window < 1 {
		return 0, fmt.Errorf("outboxmqtt: baseline needs n >= 0, payloadBytes >= 0 and window >= 1 (got %d, %d, %d)", n, payloadBytes, window)
	}
	dest := destination(s.TopicTemplate, topic)
	if reason := topicNameProblem(dest); reason != "" {
		return 0, fmt.Errorf("outboxmqtt: baseline: topic %q %s", dest, reason)
	}
	cm, recvMax, err := dialBaseline(ctx, s)
	if err != nil {
		return 0, err
	}
	defer disconnect(cm)
	window = min(window, int(recvMax))
	payload := []byte(`{"pad":"` + strings.Repeat("x", max(payloadBytes-10, 0)) + `"}`)
	template := newPublish(&outbox.Message{MsgID: "baseline", Topic: topic, Payload: payload, CreatedAt: time.Now()}, dest, s.Source, 1)
	elapsed, err := publishWindowed(ctx, cm, template, n, window)
	if err != nil {
		return 0, fmt.Errorf("outboxmqtt: baseline: publish: %w", err)
	}
	return elapsed, nil
}

// dialBaseline connects as the Publisher does, with a clean session of its
// own, and returns the connection and the broker's Receive Maximum (65535
// when the CONNACK does not set it).
func dialBaseline(ctx context.Context, s *publisherSettings) (*autopaho.ConnectionManager, uint16, error) {
	var recvMax uint16 = 65535
	var mu sync.Mutex
	cm, err := dial(ctx, connOptions{
		url: s.url, clientID: s.ClientID + "-baseline", keepAlive: s.KeepAlive,
		connectTimeout: s.DialTimeout, packetTimeout: s.AckTimeout, tls: s.TLS, cleanStart: true,
		// The Publisher's session store, which keeps each PUBLISH without
		// encoding it a second time.
		session: newPublisherSession(),
		onUp: func(_ *autopaho.ConnectionManager, ca *paho.Connack) {
			if ca.Properties != nil && ca.Properties.ReceiveMaximum != nil {
				mu.Lock()
				recvMax = *ca.Properties.ReceiveMaximum
				mu.Unlock()
			}
		},
	})
	if err != nil {
		return nil, 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	return cm, recvMax, nil
}

// publishWindowed publishes n copies of template, each with its own
// CloudEvents id, from window goroutines at once, each waiting for its
// PUBACK, and returns how long that took. It stops at the first failure,
// or when ctx ends, and returns that error.
func publishWindowed(ctx context.Context, cm *autopaho.ConnectionManager, template *paho.Publish, n, window int) (time.Duration, error) {
	idAt := slices.IndexFunc(template.Properties.User, func(u paho.UserProperty) bool { return u.Key == cloudevents.ID })
	var seq atomic.Int64

	start := time.Now()
	next := make(chan struct{})
	errc := make(chan error, window)
	var wg sync.WaitGroup
	for range window {
		wg.Go(func() {
			for range next {
				pub, props := *template, *template.Properties
				props.User = slices.Clone(props.User)
				props.User[idAt].Value = "baseline-" + strconv.FormatInt(seq.Add(1), 10)
				pub.Properties = &props
				_, err := cm.Publish(ctx, &pub)
				if err != nil {
					errc <- err
					for range next { //nolint:revive // drain so the feeder does not block
					}
					return
				}
			}
		})
	}
	var sendErr error
feed:
	for range n {
		select {
		case next <- struct{}{}:
		case sendErr = <-errc:
			break feed
		case <-ctx.Done():
			sendErr = ctx.Err()
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errc)
	elapsed := time.Since(start)
	if sendErr == nil {
		sendErr = <-errc
	}
	return elapsed, sendErr
}

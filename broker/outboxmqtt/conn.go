package outboxmqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"syscall"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/outbox-go/outbox"
)

// connOptions describes one managed MQTT connection.
type connOptions struct {
	url            *brokerURL
	clientID       string
	keepAlive      time.Duration
	connectTimeout time.Duration
	packetTimeout  time.Duration
	tls            *tls.Config
	// cleanStart discards any session the broker holds for clientID on the
	// first connection; sessionExpiry is the MQTT Session Expiry Interval.
	cleanStart    bool
	sessionExpiry uint32
	session       session.SessionManager
	onPublish     func(paho.PublishReceived) (bool, error)
	onUp          func(*autopaho.ConnectionManager, *paho.Connack)
	// attempt, when set, opens each network connection (tests only).
	attempt func(context.Context, autopaho.ClientConfig, *url.URL) (net.Conn, error)
}

// reconnectBackoff is the wait before each reconnection attempt: random,
// starting at 100ms to 200ms and doubling up to 1s, so that a broker that
// comes back, even after a long outage, is found again within about a
// second, and a dead one is tried once a second.
var reconnectBackoff = autopaho.NewExponentialBackoff(100*time.Millisecond, time.Second, 200*time.Millisecond, 2)

// dial starts a connection that reconnects by itself until it is
// disconnected, and waits for its first connection for at most
// connectTimeout (or ctx). A broker that cannot be reached gives an error
// that satisfies outbox.IsUnavailable; one that refuses the connection gives
// a *ConnectError.
func dial(ctx context.Context, o connOptions) (*autopaho.ConnectionManager, error) {
	var (
		mu      sync.Mutex
		lastErr error
	)
	refused := make(chan *ConnectError, 1)
	// Nothing listens at the address: say so at once, as the other adapters
	// do, instead of retrying until connectTimeout.
	noListener := make(chan error, 1)
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{o.url.server},
		TlsCfg:                        o.tls,
		KeepAlive:                     uint16(o.keepAlive / time.Second), //nolint:gosec // G115: settings() bounds it to 65535s
		CleanStartOnInitialConnection: o.cleanStart,
		SessionExpiryInterval:         o.sessionExpiry,
		ReconnectBackoff:              reconnectBackoff,
		ConnectTimeout:                o.connectTimeout,
		ConnectUsername:               o.url.user,
		ConnectPassword:               o.url.password,
		OnConnectionUp:                o.onUp,
		OnConnectError: func(err error) {
			mu.Lock()
			lastErr = err
			mu.Unlock()
			if errors.Is(err, syscall.ECONNREFUSED) {
				select {
				case noListener <- err:
				default:
				}
			}
			var ce *autopaho.ConnackError
			if errors.As(err, &ce) {
				reason := ce.Reason
				if reason == "" {
					reason = reasonText(ce.ReasonCode)
				}
				select {
				case refused <- &ConnectError{URL: o.url.redacted, ReasonCode: ce.ReasonCode, Reason: reason}:
				default:
				}
			}
		},
		ClientConfig: paho.ClientConfig{
			ClientID:      o.clientID,
			Session:       o.session,
			PacketTimeout: o.packetTimeout,
		},
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 1
	}
	switch {
	case o.attempt != nil:
		cfg.AttemptConnection = o.attempt
	case useOwnDialer():
		cfg.AttemptConnection = dialBroker
	}
	if o.onPublish != nil {
		cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){o.onPublish}
	}
	// The connection lives until Disconnect, not until ctx ends: ctx only
	// bounds the wait for the first connection.
	cm, err := autopaho.NewConnection(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("outboxmqtt: %s: %w", o.url.redacted, err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, o.connectTimeout)
	defer cancel()
	up := make(chan error, 1)
	go func() { up <- cm.AwaitConnection(waitCtx) }()
	var fail error
	select {
	case err = <-up:
		if err == nil {
			return cm, nil
		}
		mu.Lock()
		cause := lastErr
		mu.Unlock()
		if cause == nil {
			cause = err
		}
		fail = outbox.Unavailable(fmt.Errorf("outboxmqtt: cannot connect to %s within %s: %w", o.url.redacted, o.connectTimeout, cause))
		if ctx.Err() != nil {
			fail = outbox.Unavailable(fmt.Errorf("outboxmqtt: connecting to %s: %w", o.url.redacted, ctx.Err()))
		}
	case ce := <-refused:
		cancel()
		<-up //nolint:errcheck // wait for the connection attempt to end; fail says why
		fail = ce
	case err := <-noListener:
		cancel()
		<-up //nolint:errcheck // wait for the connection attempt to end; fail says why
		fail = outbox.Unavailable(fmt.Errorf("outboxmqtt: cannot connect to %s: %w", o.url.redacted, err))
	}
	disconnect(cm)
	return nil, fail
}

// disconnect sends DISCONNECT (when connected) and stops reconnecting.
func disconnect(cm *autopaho.ConnectionManager) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = cm.Disconnect(ctx)
}

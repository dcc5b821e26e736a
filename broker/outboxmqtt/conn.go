package outboxmqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
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
	// configure is the caller's ClientConfig hook, or nil.
	configure func(*autopaho.ClientConfig)
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
	cm, _, err := dialNamed(ctx, o)
	return cm, err
}

// dialNamed is dial that also returns the name of the servers for errors,
// passwords masked: the URL's, or those a ClientConfig hook set.
func dialNamed(ctx context.Context, o connOptions) (*autopaho.ConnectionManager, string, error) {
	first := newFirstConnect(o.url.redacted)
	cfg := o.clientConfig(first.onError)
	if o.configure != nil {
		first.redacted = redactedServers(cfg.ServerUrls)
	}
	// The connection lives until Disconnect, not until ctx ends: ctx only
	// bounds the wait for the first connection.
	cm, err := autopaho.NewConnection(context.Background(), cfg)
	if err != nil {
		return nil, "", fmt.Errorf("outboxmqtt: %s: %w", first.redacted, err)
	}
	if err := first.await(ctx, cm, o.connectTimeout); err != nil {
		disconnect(cm)
		return nil, "", err
	}
	return cm, first.redacted, nil
}

// clientConfig returns the autopaho configuration of the connection;
// onConnectError sees each failed connection attempt.
func (o connOptions) clientConfig(onConnectError func(error)) autopaho.ClientConfig {
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
		OnConnectError:                onConnectError,
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
	if o.configure != nil {
		configure(&cfg, o.configure)
	}
	return cfg
}

// configure lets hook change cfg, then puts back what the adapter's
// guarantees rest on: the client id, the session state (which sends the
// acks), clean start and session expiry, also in the CONNECT packet, the
// packet timeout, and the callbacks, with the hook's run after the
// adapter's. A hook's OnConnectionDown cannot stop the reconnecting.
func configure(cfg *autopaho.ClientConfig, hook func(*autopaho.ClientConfig)) {
	own := *cfg
	cfg.OnPublishReceived, cfg.OnConnectionUp, cfg.OnConnectError = nil, nil, nil
	hook(cfg)
	cfg.ClientID, cfg.Session, cfg.PacketTimeout = own.ClientID, own.Session, own.PacketTimeout
	cfg.CleanStartOnInitialConnection, cfg.SessionExpiryInterval = own.CleanStartOnInitialConnection, own.SessionExpiryInterval
	cfg.EnableManualAcknowledgment = false
	cfg.OnPublishReceived = slices.Concat(own.OnPublishReceived, cfg.OnPublishReceived)
	if up, theirs := own.OnConnectionUp, cfg.OnConnectionUp; theirs != nil {
		cfg.OnConnectionUp = func(cm *autopaho.ConnectionManager, ca *paho.Connack) {
			if up != nil {
				up(cm, ca)
			}
			theirs(cm, ca)
		}
	} else {
		cfg.OnConnectionUp = up
	}
	if onErr, theirs := own.OnConnectError, cfg.OnConnectError; theirs != nil {
		cfg.OnConnectError = func(err error) {
			if onErr != nil {
				onErr(err)
			}
			theirs(err)
		}
	} else {
		cfg.OnConnectError = onErr
	}
	if down := cfg.OnConnectionDown; down != nil {
		cfg.OnConnectionDown = func() bool {
			down()
			return true
		}
	}
	if build := cfg.ConnectPacketBuilder; build != nil {
		cfg.ConnectPacketBuilder = func(cp *paho.Connect, u *url.URL) (*paho.Connect, error) {
			id, clean := cp.ClientID, cp.CleanStart
			var expiry *uint32
			if cp.Properties != nil {
				expiry = cp.Properties.SessionExpiryInterval
			}
			cp, err := build(cp, u)
			if cp != nil {
				cp.ClientID, cp.CleanStart = id, clean
				if cp.Properties == nil {
					cp.Properties = &paho.ConnectProperties{}
				}
				cp.Properties.SessionExpiryInterval = expiry
			}
			return cp, err
		}
	}
}

// redactedServers names the servers of a configuration, passwords masked.
func redactedServers(us []*url.URL) string {
	names := make([]string, len(us))
	for i, u := range us {
		names[i] = u.Redacted()
	}
	return strings.Join(names, ",")
}

// firstConnect follows the connection attempts up to the first connection,
// so that dial can say why it failed.
type firstConnect struct {
	redacted string // the broker, for errors
	mu       sync.Mutex
	lastErr  error
	refused  chan *ConnectError
	// noListener: nothing listens at the address. Dial says so at once, as
	// the other adapters do, instead of retrying until connectTimeout.
	noListener chan error
}

func newFirstConnect(redacted string) *firstConnect {
	return &firstConnect{redacted: redacted, refused: make(chan *ConnectError, 1), noListener: make(chan error, 1)}
}

// onError records a failed connection attempt.
func (f *firstConnect) onError(err error) {
	f.mu.Lock()
	f.lastErr = err
	f.mu.Unlock()
	if errors.Is(err, syscall.ECONNREFUSED) {
		select {
		case f.noListener <- err:
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
		case f.refused <- &ConnectError{URL: f.redacted, ReasonCode: ce.ReasonCode, Reason: reason}:
		default:
		}
	}
}

// await waits for cm's first connection for at most timeout (or ctx). It
// returns a *ConnectError when the broker refused the connection, and an
// error that satisfies outbox.IsUnavailable when it could not be reached.
func (f *firstConnect) await(ctx context.Context, cm *autopaho.ConnectionManager, timeout time.Duration) error {
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	up := make(chan error, 1)
	go func() { up <- cm.AwaitConnection(waitCtx) }()
	select {
	case err := <-up:
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return outbox.Unavailable(fmt.Errorf("outboxmqtt: connecting to %s: %w", f.redacted, ctx.Err()))
		}
		f.mu.Lock()
		cause := f.lastErr
		f.mu.Unlock()
		if cause == nil {
			cause = err
		}
		return outbox.Unavailable(fmt.Errorf("outboxmqtt: cannot connect to %s within %s: %w", f.redacted, timeout, cause))
	case ce := <-f.refused:
		cancel()
		<-up //nolint:errcheck // wait for the connection attempt to end; the refusal says why
		return ce
	case err := <-f.noListener:
		cancel()
		<-up //nolint:errcheck // wait for the connection attempt to end; err says why
		return outbox.Unavailable(fmt.Errorf("outboxmqtt: cannot connect to %s: %w", f.redacted, err))
	}
}

// disconnect sends DISCONNECT (when connected) and stops reconnecting.
func disconnect(cm *autopaho.ConnectionManager) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = cm.Disconnect(ctx)
}

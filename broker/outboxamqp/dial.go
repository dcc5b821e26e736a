package outboxamqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/brokerconf"
)

// dial opens a connection to the broker within ctx and DialTimeout, whichever
// ends first. The error says where it tried (password masked) and satisfies
// outbox.IsUnavailable when the broker could not be reached; a refusal of
// the credentials or the vhost is a plain error wrapping ErrRefusedLogin.
func (b *broker) dial(ctx context.Context, name string) (*amqp.Connection, error) {
	if err := ctx.Err(); err != nil {
		return nil, outbox.Unavailable(fmt.Errorf("outboxamqp: connect to %s: %w", b.redacted, err))
	}
	if b.dialHook != nil {
		return b.callDial(ctx)
	}
	deadline := time.Now().Add(b.dialTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	cfg := amqp.Config{
		Properties:      props,
		TLSClientConfig: b.tls,
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Deadline: deadline}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The deadline bounds the TLS and AMQP handshakes; amqp091-go
			// clears it once the connection is open.
			if err := conn.SetDeadline(deadline); err != nil {
				conn.Close()
				return nil, err
			}
			return conn, nil
		},
	}
	if b.tls != nil {
		cfg.TLSClientConfig = b.tls.Clone()
	}
	type result struct {
		conn *amqp.Connection
		err  error
	}
	done := make(chan result, 1)
	go func() {
		c, err := amqp.DialConfig(b.url, cfg)
		done <- result{c, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		// The handshake is bounded by the deadline set on the socket; let it
		// finish in the background and close what it opened.
		go func() {
			if r := <-done; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, outbox.Unavailable(fmt.Errorf("outboxamqp: connect to %s: %w", b.redacted, ctx.Err()))
	}
	if r.err != nil {
		return nil, b.dialError(r.err)
	}
	return r.conn, nil
}

// callDial opens a connection with the Dial hook, within ctx and
// DialTimeout. A hook that returns later than that has its connection
// closed.
func (b *broker) callDial(ctx context.Context) (*amqp.Connection, error) {
	ctx, cancel := context.WithTimeout(ctx, b.dialTimeout)
	defer cancel()
	type result struct {
		conn *amqp.Connection
		err  error
	}
	done := make(chan result, 1)
	go func() {
		c, err := b.dialHook(ctx)
		done <- result{c, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		go func() {
			if r := <-done; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, outbox.Unavailable(fmt.Errorf("outboxamqp: Dial: %w", ctx.Err()))
	}
	switch {
	case r.err != nil:
		return nil, b.dialError(r.err)
	case r.conn == nil:
		return nil, outbox.Unavailable(errors.New("outboxamqp: Dial returned neither a connection nor an error"))
	case r.conn.IsClosed():
		return nil, outbox.Unavailable(errors.New("outboxamqp: Dial returned a closed connection"))
	}
	return r.conn, nil
}

// ErrRefusedLogin marks a connection the broker refused: wrong user or
// password, no access to the vhost, or a vhost that does not exist.
var ErrRefusedLogin = errors.New("outboxamqp: the broker refused the login")

func (b *broker) dialError(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && (ae.Code == amqp.AccessRefused || ae.Code == amqp.NotAllowed) ||
		errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrVhost) || errors.Is(err, amqp.ErrSASL) {
		check := "the URL's user, password and vhost"
		if b.dialHook != nil {
			check = "the user, password and vhost Dial logs in with"
		}
		return fmt.Errorf("%w at %s (check %s): %w", ErrRefusedLogin, b.redacted, check, err)
	}
	if b.dialHook != nil {
		return outbox.Unavailable(fmt.Errorf("outboxamqp: Dial: %w", err))
	}
	// amqp091-go's errors name the address, never the URL or the password.
	return outbox.Unavailable(fmt.Errorf("outboxamqp: connect to %s: %w", b.redacted, err))
}

// declareExchange declares the exchange, durable, or checks that it exists
// when noDeclare is set.
func declareExchange(ch *amqp.Channel, name, kind string, noDeclare bool) error {
	if name == "" {
		return nil // the default exchange always exists
	}
	if noDeclare {
		if err := ch.ExchangeDeclarePassive(name, kind, true, false, false, false, nil); err != nil {
			return topologyError(fmt.Sprintf("exchange %q does not exist (declare=false)", name), err)
		}
		return nil
	}
	if err := ch.ExchangeDeclare(name, kind, true, false, false, false, nil); err != nil {
		return topologyError(fmt.Sprintf("declare exchange %q (durable %s)", name, kind), err)
	}
	return nil
}

// ErrTopology marks a declaration the broker refused: an exchange or queue
// that exists with other settings, missing permissions, a missing exchange
// with declare=false. It does not heal by itself.
var ErrTopology = errors.New("outboxamqp: the broker refused a declaration")

func topologyError(what string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code >= 400 && ae.Code < 500 {
		hint := ""
		switch ae.Code {
		case amqp.PreconditionFailed:
			hint = " (it exists with other settings: delete it or change the name)"
		case amqp.AccessRefused:
			hint = " (the user lacks the configure permission: declare it beforehand and set declare=false)"
		}
		return fmt.Errorf("%w: %s: %s%s", ErrTopology, what, ae.Reason, hint)
	}
	return outbox.Unavailable(fmt.Errorf("outboxamqp: %s: %w", what, err))
}

// isPermanent reports whether err will not heal by reconnecting.
func isPermanent(err error) bool {
	return errors.Is(err, ErrRefusedLogin) || errors.Is(err, ErrTopology) || errors.Is(err, ErrConfig)
}

// ParseURL returns the PublisherConfig that a broker URL describes, for a
// caller that takes the URL from the command line and then sets fields in
// Go: this package's query parameters, connection_timeout and the TLS ones
// (tls_* or RabbitMQ's cacertfile, certfile, keyfile,
// server_name_indication, loaded into TLS) move into their fields with the
// defaults filled in, and URL keeps the rest for amqp091-go (heartbeat,
// channel_max, auth_mechanism). A field changed afterwards wins, including
// NoDeclare. Errors wrap ErrConfig and never contain the password.
func ParseURL(raw string) (PublisherConfig, error) {
	st, err := PublisherConfig{URL: raw}.settings()
	if err != nil {
		return PublisherConfig{}, err
	}
	keep := map[string]bool{"heartbeat": true, "channel_max": true, "auth_mechanism": true}
	return PublisherConfig{
		URL:    brokerconf.Without(raw, func(name string) bool { return !keep[name] }),
		Source: st.source, Exchange: st.exchange, ExchangeType: st.kind, RoutingKey: st.routingKey,
		NoDeclare: st.noDeclare, Timeout: st.timeout, DialTimeout: st.dialTimeout, MaxMessageBytes: st.maxBytes,
		TLS: st.tls, Logger: st.logger,
	}, nil
}

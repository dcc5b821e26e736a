package outboxnats

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox"
)

// connect opens a connection that reconnects forever. Publishes made while it
// reconnects fail at once (no reconnect buffer) instead of waiting in a
// buffer whose fate nobody reports: the caller sees outbox.Unavailable.
func connect(ctx context.Context, u *brokerURL, name string, a auth, timeout time.Duration, opts ...nats.Option) (*nats.Conn, error) {
	if a.own != nil {
		return a.own, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, outbox.Unavailable(fmt.Errorf("outboxnats: connect to %s: %w", u.redacted, err))
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	opts = append([]nats.Option{
		nats.Name(name),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(-1),
		nats.PingInterval(10 * time.Second),
		// The defaults print to stderr; the adapter reports through its
		// errors and the subscriber's logger instead.
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
	}, opts...)
	if a.creds != "" {
		opts = append(opts, nats.UserCredentials(a.creds))
	}
	if a.nkey != "" {
		opt, err := nats.NkeyOptionFromSeed(a.nkey)
		if err != nil {
			// The error names the file's problem, never the seed.
			return nil, configErrorf("nkey seed file %q: %v", a.nkey, err)
		}
		opts = append(opts, opt)
	}
	if a.tls != nil {
		// Secure makes TLS a requirement: a server that does not offer it
		// is refused, never spoken to in plain text.
		opts = append(opts, nats.Secure(a.tls))
	}
	nc, err := nats.Connect(u.servers, opts...)
	if err != nil {
		err = fmt.Errorf("outboxnats: connect to %s: %s", u.redacted, scrub(err.Error(), u))
		if isAuthError(err) {
			return nil, err
		}
		return nil, outbox.Unavailable(err)
	}
	return nc, nil
}

// auth is how a connection logs in and encrypts, or the caller's own
// connection.
type auth struct {
	creds, nkey string
	tls         *tls.Config
	own         *nats.Conn
}

// scrub removes the servers' raw text (which may hold a password) from an
// error message of the client library.
func scrub(msg string, u *brokerURL) string {
	for _, s := range strings.Split(u.servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			msg = strings.ReplaceAll(msg, s, redactServer(s))
		}
	}
	return msg
}

// isAuthError reports an error that reconnecting will not cure.
func isAuthError(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "authorization") || strings.Contains(s, "authentication")
}

// newJetStream returns the JetStream context of nc with the adapter's
// timeouts.
func newJetStream(nc *nats.Conn, timeout time.Duration) (jetstream.JetStream, error) {
	return jetstream.New(nc,
		jetstream.WithDefaultTimeout(timeout),
		jetstream.WithPublishAsyncTimeout(timeout),
		jetstream.WithPublishAsyncMaxPending(8192),
	)
}

// ensureStream returns stream name, creating it over subjects with cfg when it
// does not exist. A stream that exists must cover subjects; its settings are
// left as they are.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, role string) (jetstream.Stream, error) {
	want := cfg.Subjects[0]
	for attempt := 0; ; attempt++ {
		s, err := js.Stream(ctx, cfg.Name)
		if err == nil {
			for _, subj := range s.CachedInfo().Config.Subjects {
				if subjectCovers(subj, want) {
					return s, nil
				}
			}
			return nil, fmt.Errorf("outboxnats: stream %s exists but its subjects %v do not cover %s, the %s; add %q to the stream's subjects, or name another stream",
				cfg.Name, s.CachedInfo().Config.Subjects, want, role, want)
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, jsError(fmt.Sprintf("look up stream %s", cfg.Name), err)
		}
		s, err = js.CreateStream(ctx, cfg)
		if err == nil {
			return s, nil
		}
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) && attempt == 0 {
			continue // created by someone else meanwhile: check it
		}
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && strings.Contains(strings.ToLower(apiErr.Description), "overlap") {
			return nil, fmt.Errorf("outboxnats: cannot create stream %s over %s: another stream already holds these subjects (%s); name that stream in the URL (?stream=NAME), or pick another subject prefix",
				cfg.Name, want, apiErr.Description)
		}
		return nil, jsError(fmt.Sprintf("create stream %s over %s", cfg.Name, want), err)
	}
}

// jsError wraps an error of a JetStream API call; errors that mean the server
// or JetStream cannot be reached satisfy outbox.IsUnavailable.
func jsError(what string, err error) error {
	err = fmt.Errorf("outboxnats: %s: %w", what, err)
	if unavailableErr(err) {
		return outbox.Unavailable(err)
	}
	return err
}

// unavailableErr reports errors that say nothing about a message: the
// connection is down, JetStream does not answer, the caller gave up, or the
// server reports a condition of its own (a 5xx API error: JetStream disabled
// or not ready, storage exhausted).
func unavailableErr(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code >= 500
	}
	for _, target := range []error{
		context.Canceled, context.DeadlineExceeded,
		nats.ErrTimeout, nats.ErrNoResponders, nats.ErrConnectionClosed, nats.ErrConnectionDraining,
		nats.ErrConnectionReconnecting, nats.ErrDisconnected, nats.ErrReconnectBufExceeded,
		nats.ErrInvalidConnection, nats.ErrStaleConnection,
		jetstream.ErrNoStreamResponse, jetstream.ErrAsyncPublishTimeout, jetstream.ErrTooManyStalledMsgs,
		jetstream.ErrJetStreamNotEnabled, jetstream.ErrJetStreamNotEnabledForAccount,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// ParseURL returns the PublisherConfig that a broker URL describes, for a
// caller that takes the URL from the command line and then sets fields in
// Go: every query parameter is moved into its field (the TLS files loaded
// into TLS), the defaults are filled in, and URL keeps only the servers and
// their credentials. A field changed afterwards wins, including a boolean
// the URL turned on. Errors satisfy errors.Is(err, ErrConfig) and never
// contain a password or token.
func ParseURL(raw string) (PublisherConfig, error) {
	st, err := PublisherConfig{URL: raw}.settings()
	if err != nil {
		return PublisherConfig{}, err
	}
	cfg := st.PublisherConfig
	cfg.URL = st.url.servers
	return cfg, nil
}

package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
)

const (
	// maxDrain bounds how much of a response body is read before closing it.
	// Reading the rest lets the connection go back to the pool; a body larger
	// than this is not worth the wait, and the connection is dropped instead.
	maxDrain = 64 << 10
	// maxErrorBody is how much of a failed response's body goes into the error.
	maxErrorBody = 256
)

// Publisher POSTs messages to one HTTP endpoint as CloudEvents in binary mode.
// It is safe for concurrent use.
type Publisher struct {
	url         string   // as configured, for requests
	redacted    string   // with its credentials masked (redactURL), for errors
	source      string   // percent-encoded
	keys        [][]byte // signing keys; none when not signing
	legacy      bool     // also sign in sigHeader (Config.LegacySignature)
	sigHeader   string
	timeout     time.Duration
	concurrency int
	header      http.Header
	client      *http.Client
	ownClient   bool
	headers     *cloudevents.HeaderLog
}

var _ outbox.Publisher = (*Publisher)(nil)

// New validates cfg, applies its defaults and returns a Publisher. The error
// names the field to fix.
func New(cfg Config) (*Publisher, error) {
	cfg = cfg.WithDefaults()
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	tlsCfg, err := cfg.tlsConfig(u)
	if err != nil {
		return nil, err
	}
	p := &Publisher{
		url:         u.String(),
		redacted:    redactURL(u),
		source:      encodeValue(cfg.Source),
		legacy:      cfg.LegacySignature,
		sigHeader:   http.CanonicalHeaderKey(cfg.SignatureHeader),
		timeout:     cfg.Timeout,
		concurrency: cfg.Concurrency,
		header:      make(http.Header, len(cfg.Header)),
		client:      cfg.Client,
		headers:     cloudevents.NewHeaderLog(nil, "webhook"),
	}
	for name, values := range cfg.Header {
		for _, v := range values {
			p.header.Add(name, v)
		}
	}
	for _, secret := range cfg.signingSecrets() {
		key, _ := ParseSecret(secret) // checked in validate
		p.keys = append(p.keys, key)
	}
	if p.client == nil {
		p.client = defaultClient(cfg.Concurrency, tlsCfg)
		p.ownClient = true
	}
	return p, nil
}

// defaultClient keeps up to concurrency idle connections to the endpoint, so
// that a batch sent in parallel reuses them instead of dialling again each
// time (net/http keeps only 2 per host by default).
func defaultClient(concurrency int, tlsCfg *tls.Config) *http.Client {
	var t *http.Transport
	if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		t = dt.Clone()
	} else {
		t = &http.Transport{Proxy: http.ProxyFromEnvironment}
	}
	t.MaxIdleConnsPerHost = concurrency
	if tlsCfg != nil {
		t.TLSClientConfig = tlsCfg
	}
	if t.MaxIdleConns != 0 && t.MaxIdleConns < concurrency {
		t.MaxIdleConns = concurrency
	}
	return &http.Client{
		Transport: t,
		// Following a 301, 302 or 303 would repeat the request as a GET
		// without the body, and a 2xx to that GET would look like an ack of
		// a message that was never delivered.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Close closes the idle connections of the publisher's own client. A Client
// given in Config belongs to the caller and is left alone. The Publisher stays
// usable: a later Publish opens new connections.
func (p *Publisher) Close() error {
	if p.ownClient {
		p.client.CloseIdleConnections()
	}
	return nil
}

// Publish POSTs every message and returns one error per message, in order, or
// nil when the endpoint acknowledged them all (any 2xx status).
//
// Messages with the same non-empty key are sent one after another in slice
// order, and once one of them fails the later ones are held back (ErrHeldBack)
// so that they cannot overtake it. Other messages are sent in parallel, at
// most Concurrency requests at a time.
//
// Errors satisfying outbox.IsUnavailable (the relay pauses and the message
// keeps its retries): the endpoint could not be reached (dial, DNS, TLS,
// connection reset, no connection within Timeout); a status that every
// message would get alike (a redirect, 401, 403, 404, 405, 408, 410, 429,
// every 5xx but 500: see StatusError), whose Retry-After the relay honours
// up to RelayConfig.PauseMax (outbox.RetryAfter); ctx ended before or while
// the message was sent. A message held back behind a failed one of its key gets
// ErrHeldBack and is kept; it pauses the relay only when the failure did
// (see outbox.PublishKeyGroups). Any other error is a refusal that spends a
// retry: a status that concerns the message (400, 409, 413, 415, 422, 500
// and other 4xx; a *StatusError), or no response within Timeout on an
// established connection while the endpoint answered another request of
// the same call, since the endpoint may have acted on the message. When no
// request of the call was answered (see answeredAny), such timeouts are
// unavailable instead.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := outbox.PublishKeyGroups(ctx, msgs, p.concurrency, p.send)
	if errs == nil || answeredAny(errs) || timeouts(errs) == 0 {
		return errs
	}
	// A request that got no answer in time cannot tell by itself a hung
	// endpoint from a message the endpoint chokes on. When the endpoint
	// answered another request of the call, it is at work, and a message
	// that timed out spends its retry. When it answered none, the timeouts
	// are unavailable: the relay tells a hung endpoint from a message that
	// hangs it by publishing that message alone after the others (see
	// outbox.RelayConfig and the relay's handling of unavailable errors).
	for i, err := range errs {
		var nr *noResponseError
		switch {
		case errors.As(err, &nr):
			errs[i] = outbox.Unavailable(fmt.Errorf("%w; the endpoint answered no request of the batch", err))
		case errors.Is(err, outbox.ErrHeldBack):
			// Held back behind a timeout that is now unavailable, as
			// PublishKeyGroups marks one behind an unavailable failure.
			errs[i] = outbox.Unavailable(err)
		}
	}
	return errs
}

// answeredAny reports whether the endpoint answered at least one request of
// a call in a way that shows it at work: a 2xx, or a status that refuses the
// message. Unavailable errors, timeouts and messages held back or not sent
// show nothing of the kind.
func answeredAny(errs []error) bool {
	for _, err := range errs {
		var nr *noResponseError
		if err == nil || !outbox.IsUnavailable(err) && !errors.Is(err, outbox.ErrHeldBack) && !errors.As(err, &nr) {
			return true
		}
	}
	return false
}

// timeouts counts the requests of a call that got no response in time.
func timeouts(errs []error) int {
	n := 0
	for _, err := range errs {
		var nr *noResponseError
		if errors.As(err, &nr) {
			n++
		}
	}
	return n
}

// noResponseError is a request sent on an established connection that got
// no response within Config.Timeout. On its own it is a refusal; Publish
// makes it unavailable when no request of the call was answered.
type noResponseError struct{ err error }

func (e *noResponseError) Error() string { return e.err.Error() }
func (e *noResponseError) Unwrap() error { return e.err }

// send POSTs one message and classifies the outcome.
func (p *Publisher) send(ctx context.Context, m *outbox.Message) error {
	reqCtx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	// Whether a connection was obtained tells a timeout while connecting (the
	// endpoint is unreachable) from one while waiting for the answer (the
	// endpoint is there and may have acted on the message).
	var connected atomic.Bool
	reqCtx = httptrace.WithClientTrace(reqCtx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
	})
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, p.url, bytes.NewReader(m.Payload))
	if err != nil {
		// The URL was checked in New, so this is a programming error; it is
		// not the message's fault, so it must not spend its retries.
		return outbox.Unavailable(fmt.Errorf("webhook: POST %s: %w", p.redacted, err))
	}
	// A copy, because a caller's RoundTripper may modify the request's headers.
	req.Header = p.header.Clone()
	p.setEventHeaders(req.Header, m)
	p.sign(req.Header, m.Payload, time.Now())

	resp, err := p.client.Do(req) //nolint:bodyclose // closed below by drainAndClose
	if err != nil {
		return p.transportError(ctx, reqCtx, err, connected.Load())
	}
	defer drainAndClose(resp.Body)

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if resp.Request != nil && resp.Request.Method != http.MethodPost {
			// Only a caller's Client can get here: it followed a redirect
			// that turned the POST into a GET, so the 2xx says nothing about
			// the message. Every message would be redirected alike, so it
			// pauses the relay like the redirect status itself would.
			return outbox.Unavailable(fmt.Errorf("webhook: POST %s: redirected to %s, which answered a %s without the body; set Config.URL to the final address",
				p.redacted, redactURL(resp.Request.URL), resp.Request.Method))
		}
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	serr := &StatusError{
		URL:        p.redacted,
		StatusCode: resp.StatusCode,
		Status:     resp.Status,
		RetryAfter: resp.Header.Get("Retry-After"),
		RetryDelay: parseRetryAfter(resp.Header, time.Now()),
		Body:       printable(body),
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		serr.Location = resp.Header.Get("Location")
	}
	err = outbox.WithRetryAfter(serr, serr.RetryDelay)
	if unavailableStatus(resp.StatusCode) {
		return outbox.Unavailable(err)
	}
	return err
}

// transportError classifies an error from Client.Do, which means no response
// arrived.
func (p *Publisher) transportError(ctx, reqCtx context.Context, err error, connected bool) error {
	cause := err
	var uerr *url.Error
	if errors.As(err, &uerr) {
		cause = uerr.Err // url.Error repeats the method and URL
	}
	switch {
	case ctx.Err() != nil:
		// The caller gave up (the relay's deadline or shutdown); that says
		// nothing about the message.
		return outbox.Unavailable(fmt.Errorf("webhook: POST %s: %w", p.redacted, ctx.Err()))
	case isTimeout(reqCtx, err) && connected:
		// Whether this spends a retry depends on the rest of the call; see
		// Publish.
		return &noResponseError{fmt.Errorf("webhook: POST %s: no response within %s (Config.Timeout); the endpoint may still process the message: %w",
			p.redacted, p.timeout, cause)}
	case isTimeout(reqCtx, err):
		return outbox.Unavailable(fmt.Errorf("webhook: POST %s: no connection within %s (Config.Timeout): %w", p.redacted, p.timeout, cause))
	default:
		// Dial, DNS, TLS and reset errors: the endpoint cannot be reached.
		return outbox.Unavailable(fmt.Errorf("webhook: POST %s: %w", p.redacted, cause))
	}
}

func isTimeout(reqCtx context.Context, err error) bool {
	if errors.Is(reqCtx.Err(), context.DeadlineExceeded) {
		return true
	}
	var nerr net.Error
	return errors.As(err, &nerr) && nerr.Timeout()
}

// drainAndClose reads what is left of a body, up to maxDrain, so that the
// connection can be reused, then closes it.
func drainAndClose(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, maxDrain)
	_ = body.Close()
}

// sign adds the Standard Webhooks headers for body, sent now, to h, one
// signature per key, and the legacy signature when asked for. It does
// nothing without a key.
func (p *Publisher) sign(h http.Header, body []byte, now time.Time) {
	if len(p.keys) == 0 {
		return
	}
	id := h.Get("Idempotency-Key")
	ts := strconv.FormatInt(now.Unix(), 10)
	sigs := make([]string, len(p.keys))
	for i, k := range p.keys {
		sigs[i] = signV1(k, id, ts, body)
	}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderSignature, strings.Join(sigs, " "))
	if p.legacy {
		h.Set(p.sigHeader, signLegacy(p.keys[0], body))
	}
}

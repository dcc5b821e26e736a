package webhook

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/outbox-go/outbox/internal/brokerconf"
	"github.com/outbox-go/outbox/internal/redact"
)

// Defaults applied by New to zero fields of Config.
const (
	DefaultSource          = "/outbox"
	DefaultSignatureHeader = "X-Outbox-Signature-256"
	DefaultTimeout         = 10 * time.Second
	DefaultConcurrency     = 16
)

// Config configures a Publisher. Zero fields take their defaults; New checks
// the rest and says which field to fix.
type Config struct {
	// URL is the endpoint every message is POSTed to, with scheme http or https
	// and a host, e.g. "https://example.com/events". Required. Redirects are
	// not followed by the default client: point URL at the final address (a
	// redirect, like a 404 or a 401, pauses the relay until it is fixed).
	URL string
	// Source is the CloudEvents source attribute (a URI reference) sent as
	// ce-source; it tells receivers which system produced the events.
	// Defaults to "/outbox".
	Source string
	// Secret, when set, makes the publisher sign each request as Standard
	// Webhooks do: the headers webhook-id (the msg_id, as Idempotency-Key),
	// webhook-timestamp (Unix seconds, at each attempt) and
	// webhook-signature ("v1,<base64 HMAC-SHA256 of id.timestamp.body>").
	// Receivers check them with Verify. A secret is taken as raw bytes, or as
	// base64 after a "whsec_" prefix. Defaults to "" (no signature).
	Secret string
	// Secrets are further secrets, for a rotation: the request carries one
	// signature per secret, Secret's first, separated by spaces, so that a
	// receiver knowing any of them accepts it. Defaults to none.
	Secrets []string
	// LegacySignature also sends the signature of earlier releases in
	// SignatureHeader: "sha256=" followed by the lower-case hex HMAC-SHA256
	// of the body under the first secret (VerifyLegacy checks it), for
	// receivers not yet moved to Verify. It signs no timestamp, so it does
	// not protect against replays. Defaults to false.
	LegacySignature bool
	// SignatureHeader is the name of the header that carries the legacy
	// signature. Used only with LegacySignature. Defaults to
	// "X-Outbox-Signature-256".
	SignatureHeader string
	// Timeout bounds one request, from dialling until the response has been
	// read. A request that could not connect in time pauses the relay
	// without spending the message's retries. One that connected but got no
	// answer in time does the same when the endpoint answered no request of
	// the batch (it hangs); when it answered others, the message spends one
	// of its retries, since the endpoint is at work and may have processed
	// it. Defaults to 10s.
	Timeout time.Duration
	// Concurrency is the most requests in flight at once within one Publish
	// call. Messages that share a key are always sent one after another, so
	// they take one slot between them. Defaults to 16.
	Concurrency int
	// Header holds static headers added to every request, e.g. Authorization.
	// It may not set the headers the publisher writes per message (ce-*,
	// Content-Type, Content-Length, Host, Idempotency-Key, the signature
	// header). New copies it, so later changes by the caller have no effect.
	// Defaults to none.
	Header http.Header
	// TLS is the TLS configuration of the publisher's own client, for an
	// endpoint whose certificate a private CA signed, or that asks for a
	// client certificate (mTLS). The URL gives one with its tls_ca, tls_cert,
	// tls_key and tls_server_name query parameters, which are not sent to the
	// endpoint; TLS wins over them. Not used with Client. Defaults to nil
	// (the system's roots).
	TLS *tls.Config
	// Client sends the requests. The publisher sets no Timeout on it, does not
	// change its redirect policy and leaves its idle connections alone in
	// Close: it belongs to the caller. Defaults to a client of its own whose
	// Transport is a clone of http.DefaultTransport with MaxIdleConnsPerHost
	// = Concurrency, and which does not follow redirects.
	Client *http.Client
}

// WithDefaults returns cfg with zero fields defaulted, but for Client: New
// builds its own client once cfg is valid, sized by Concurrency.
func (cfg Config) WithDefaults() Config {
	if cfg.Source == "" {
		cfg.Source = DefaultSource
	}
	if cfg.SignatureHeader == "" {
		cfg.SignatureHeader = DefaultSignatureHeader
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	return cfg
}

// validate checks a defaulted config and returns the parsed URL. Every message
// names the field and says what would be accepted, so that a person reading a
// start-up failure knows what to change.
func (cfg Config) validate() (*url.URL, error) {
	if strings.TrimSpace(cfg.URL) == "" {
		return nil, fmt.Errorf(`webhook: Config.URL is empty; set it to the endpoint to POST to, e.g. "https://example.com/events"`)
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		// url.Parse quotes the URL, and a password cut short by a '/',
		// '?' or '#' as a port or a host.
		return nil, fmt.Errorf("webhook: Config.URL %q is not a valid URL; use an absolute http or https URL, e.g. \"https://example.com/events\", "+
			"with reserved characters in a password or a query value percent-encoded", redact.URL(cfg.URL))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("webhook: Config.URL %q has scheme %q; only http and https are supported", redactURL(u), u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("webhook: Config.URL %q has no host; use an absolute URL such as \"https://example.com/events\"", redactURL(u))
	}
	if _, err := url.Parse(cfg.Source); err != nil {
		return nil, fmt.Errorf("webhook: Config.Source %q is not a URI reference (%v); use e.g. \"/outbox\" or \"https://example.com/orders\"", cfg.Source, err)
	}
	if cfg.Secret != "" {
		if _, err := ParseSecret(cfg.Secret); err != nil {
			return nil, fmt.Errorf("webhook: Config.Secret: %v; give raw bytes or whsec_ followed by base64", err)
		}
	}
	for i, secret := range cfg.Secrets {
		if _, err := ParseSecret(secret); err != nil {
			return nil, fmt.Errorf("webhook: Config.Secrets[%d]: %v; give raw bytes or whsec_ followed by base64", i, err)
		}
	}
	if cfg.LegacySignature && len(cfg.signingSecrets()) == 0 {
		return nil, fmt.Errorf("webhook: Config.LegacySignature needs Config.Secret")
	}
	if !validToken(cfg.SignatureHeader) {
		return nil, fmt.Errorf("webhook: Config.SignatureHeader %q is not a valid header name; use letters, digits and '-', e.g. %q", cfg.SignatureHeader, DefaultSignatureHeader)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("webhook: Config.Timeout is %s; it must be positive (or 0 for the default of %s)", cfg.Timeout, DefaultTimeout)
	}
	if cfg.Concurrency < 0 {
		return nil, fmt.Errorf("webhook: Config.Concurrency is %d; it must be positive (or 0 for the default of %d)", cfg.Concurrency, DefaultConcurrency)
	}
	for name, values := range cfg.Header {
		if !validToken(name) {
			return nil, fmt.Errorf("webhook: Config.Header has invalid name %q; header names are letters, digits and !#$%%&'*+-.^_`|~", name)
		}
		if reason := reservedRequestHeader(name, cfg.SignatureHeader); reason != "" {
			return nil, fmt.Errorf("webhook: Config.Header sets %q, %s; remove it from Config.Header", name, reason)
		}
		for _, v := range values {
			if !validHeaderValue(v) {
				return nil, fmt.Errorf("webhook: Config.Header %q has a value with a control character (CR, LF, NUL...); header values must be a single line", name)
			}
		}
	}
	return u, nil
}

// tlsConfig takes the TLS parameters out of u's query and returns the TLS
// configuration of the publisher's own client, or nil for the defaults.
func (cfg Config) tlsConfig(u *url.URL) (*tls.Config, error) {
	errf := func(format string, args ...any) error {
		return fmt.Errorf("webhook: Config.URL %q: "+format, append([]any{redactURL(u)}, args...)...)
	}
	q := u.Query()
	var files brokerconf.TLSFiles
	brokerconf.NewQuery(q, errf).TLSFiles(&files, nil)
	if files.IsZero() && cfg.TLS == nil {
		return nil, nil
	}
	for _, name := range brokerconf.TLSParams {
		q.Del(name)
	}
	u.RawQuery = q.Encode()
	if u.Scheme != "https" {
		return nil, errf("TLS settings need an https:// URL")
	}
	if cfg.Client != nil {
		return nil, errf("TLS settings (Config.TLS or tls_* parameters) apply to the publisher's own client; with Config.Client, set them on its Transport")
	}
	return brokerconf.ResolveTLS(cfg.TLS, files, true, errf)
}

// signingSecrets returns Secret, when set, followed by Secrets.
func (cfg Config) signingSecrets() []string {
	if cfg.Secret == "" {
		return cfg.Secrets
	}
	return append([]string{cfg.Secret}, cfg.Secrets...)
}

// reservedRequestHeader says why name may not be a static header, or "".
// Letting a static header through would either be overwritten silently or,
// worse, contradict the per-message value a receiver relies on.
func reservedRequestHeader(name, signatureHeader string) string {
	switch c := http.CanonicalHeaderKey(name); {
	case strings.HasPrefix(c, "Ce-"):
		return "a CloudEvents attribute that the publisher sets from each message"
	case c == "Content-Type", c == "Content-Length", c == "Host":
		return "which the publisher sets itself"
	case c == "Idempotency-Key":
		return "which the publisher sets to each message's msg_id"
	case c == HeaderID, c == HeaderTimestamp, c == HeaderSignature:
		return "a Standard Webhooks signature header, which the publisher sets with Config.Secret"
	case c == http.CanonicalHeaderKey(signatureHeader):
		return "the signature header (Config.SignatureHeader)"
	}
	return ""
}

// validToken reports whether s is an RFC 9110 token, the syntax of a header name.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue mirrors the check net/http makes before sending: no control
// characters except horizontal tab. Checking it in New turns what would be a
// failure of every single request into one clear start-up error.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// redactURL is u for errors, logs and last_error: its password, a user
// name standing alone (a token, for many services) and the values of
// secret-looking query parameters (token, key, signature...) masked.
func redactURL(u *url.URL) string { return redact.URL(u.String()) }

package outboxnats

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outbox-go/outbox/internal/brokerconf"
	"github.com/outbox-go/outbox/internal/redact"
)

// brokerURL is a parsed broker URL: the servers (with credentials, for
// nats.Connect), their redacted form (for messages), and the query.
type brokerURL struct {
	servers  string
	redacted string
	query    url.Values
	q        *brokerconf.Query
	tls      bool // a tls:// server
}

// knownParams are the query parameters of the package documentation. Both
// sides accept all of them, so that one URL can serve the relay and the
// consumers alike; each side ignores the other's. Anything else is a typo
// worth an error.
var knownParams = []string{
	"subject", "stream", "timeout", "creds", "nkey", "dial_timeout", // both
	"duplicates", "max_age", "storage", // publisher
	"topic", "max_deliveries", "dead", "dead_stream", "ack_wait", "redelivery_delay", "deliver", "prefetch", // subscriber
	"redelivery_delay_max", "dead_letter_after",
}

// parseURL splits "nats://a:4222,nats://b:4222?k=v" into servers and query,
// and checks each server URL. Errors never contain a password or token.
func parseURL(raw string) (*brokerURL, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, fmt.Errorf(`outboxnats: the URL is empty; set it to the NATS server, e.g. "nats://127.0.0.1:4222"`)
	}
	serverPart, rawQuery, _ := strings.Cut(raw, "?")
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, configErrorf("the URL's query %q is not valid (%v); use e.g. ?subject=outbox.{topic}&stream=OUTBOX", rawQuery, err)
	}
	q := brokerconf.NewQuery(query, configErrorf)
	if err := q.Check(knownParams, brokerconf.TLSParams); err != nil {
		return nil, err
	}
	if serverPart == "" {
		// Only query parameters: the caller's Conn says where the server is.
		return &brokerURL{query: query, q: q}, nil
	}
	var redacted []string
	var tlsScheme bool
	for _, s := range strings.Split(serverPart, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			return nil, configErrorf("the URL %q has an empty server in its comma-separated list", redactList(serverPart))
		}
		u, err := url.Parse(s)
		if err != nil {
			return nil, configErrorf("server %q is not a valid URL; use nats://host:4222", redactServer(s))
		}
		tlsScheme = tlsScheme || u.Scheme == "tls"
		if u.Scheme != "nats" && u.Scheme != "tls" {
			return nil, configErrorf("server %q has scheme %q; use nats:// (or tls:// for TLS)", redactServer(s), u.Scheme)
		}
		if u.Host == "" || u.Hostname() == "" {
			return nil, configErrorf("server %q has no host; use nats://host:4222", redactServer(s))
		}
		if u.Path != "" && u.Path != "/" {
			return nil, configErrorf("server %q has a path %q; NATS URLs have none: put options in the query (?stream=...)", redactServer(s), u.Path)
		}
		redacted = append(redacted, redactServer(s))
	}
	return &brokerURL{servers: serverPart, redacted: strings.Join(redacted, ","), query: query, q: q, tls: tlsScheme}, nil
}

// redactServer hides the password, or the token (a user name without a
// password is a token in NATS), of one server URL, and the values of
// secret-looking query parameters (internal/redact).
func redactServer(s string) string { return redact.URL(s) }

func redactList(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = redactServer(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

// conn fills the connection's fields from the URL (a field that is set
// wins) and checks them.
func (u *brokerURL) conn(creds, nkey *string, dial *time.Duration, tlsCfg **tls.Config, own *nats.Conn) error {
	if own != nil {
		return nil
	}
	if u.servers == "" {
		return configErrorf("the URL names no server; use e.g. nats://127.0.0.1:4222, or set Conn")
	}
	u.q.String(creds, "creds")
	u.q.String(nkey, "nkey")
	if err := u.q.Duration(dial, "dial_timeout"); err != nil {
		return err
	}
	if *creds != "" && *nkey != "" {
		return configErrorf("creds and nkey are two ways to log in; give one")
	}
	var files brokerconf.TLSFiles
	u.q.TLSFiles(&files, nil)
	c, err := brokerconf.ResolveTLS(*tlsCfg, files, false, configErrorf)
	if err != nil {
		return err
	}
	*tlsCfg = c
	return nil
}

package outboxmqtt

import (
	"crypto/tls"
	"net"
	"net/url"
	"strings"

	"github.com/outbox-go/outbox/internal/brokerconf"
)

// brokerURL is a parsed broker URL.
type brokerURL struct {
	server   *url.URL // scheme and host[:port] only
	user     string
	password []byte
	redacted string
	params   url.Values
	q        *brokerconf.Query
	tls      brokerconf.TLSFiles
}

// knownParams lists every query parameter; the value says who uses it.
var knownParams = map[string]string{
	"topic": "both", "connect_timeout": "both", "dial_timeout": "both", "keepalive": "both",
	"source": "pub", "client_id": "pub", "qos": "pub", "window": "pub",
	"no_subscribers": "pub", "ack_timeout": "pub",
	"name": "sub", "consume": "sub", "max_deliveries": "sub", "redelivery_delay": "sub", "redelivery_delay_max": "sub", "dead_letter_after": "sub",
	"dead_topic": "sub", "session_expiry": "sub",
}

func parseURL(raw string) (*brokerURL, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, configErrorf(`URL is empty; set it to the broker, e.g. "mqtt://localhost:1883"`)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse quotes the input in its error, which may hold a password.
		return nil, configErrorf(`URL is not a valid URL; use mqtt://[user:password@]host[:port][?topic=outbox/{topic}]`)
	}
	// Errors name the broker without the query, which may be long.
	short := *u
	short.RawQuery, short.ForceQuery, short.Fragment = "", false, ""
	b := &brokerURL{redacted: short.Redacted(), params: u.Query()}
	port := "1883"
	switch u.Scheme {
	case "mqtt":
	case "mqtts":
		port = "8883"
	default:
		return nil, configErrorf("URL %q has scheme %q; use mqtt:// or mqtts:// (TLS)", b.redacted, u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, configErrorf(`URL %q has no host; use e.g. "mqtt://localhost:1883"`, b.redacted)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, configErrorf("URL %q has a path %q; MQTT URLs have none: set the topic with ?topic=outbox/{topic}", b.redacted, u.Path)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), port)
	}
	b.server = &url.URL{Scheme: u.Scheme, Host: host}
	if u.User != nil {
		b.user = u.User.Username()
		if p, ok := u.User.Password(); ok {
			b.password = []byte(p)
		}
	}
	known := make([]string, 0, len(knownParams))
	for name := range knownParams {
		known = append(known, name)
	}
	b.q = brokerconf.NewQuery(b.params, configErrorf)
	if err := b.q.Check(known, brokerconf.TLSParams); err != nil {
		return nil, err
	}
	b.q.TLSFiles(&b.tls, nil)
	if !b.tls.IsZero() && u.Scheme != "mqtts" {
		return nil, configErrorf("URL %q has TLS parameters (tls_ca, tls_cert, ...) but scheme mqtt://; use mqtts:// for TLS", b.redacted)
	}
	return b, nil
}

// tlsConfig returns the TLS configuration of the connection: field wins
// over the URL's parameters; nil for mqtt://, or mqtts:// with neither.
func (b *brokerURL) tlsConfig(field *tls.Config) (*tls.Config, error) {
	if field != nil || !b.tls.IsZero() {
		return brokerconf.ResolveTLS(field, b.tls, false, configErrorf)
	}
	return nil, nil
}

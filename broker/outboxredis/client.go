package outboxredis

import (
	"crypto/tls"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox/internal/brokerconf"
)

// Connection parameters of this package, besides go-redis's own.
const (
	// paramCluster makes the URL's hosts (the URL's host and every addr
	// parameter) seeds of a Redis Cluster.
	paramCluster = "cluster"
	// paramSentinelMaster names the master that the URL's hosts, Redis
	// Sentinels, watch: the client follows a failover.
	paramSentinelMaster = "sentinel_master"
)

// connection is how to reach Redis: the options of one of go-redis's three
// clients (a single server, a Cluster, or a master found through Sentinel),
// or the caller's own client.
type connection struct {
	addr    string // for messages: the first host
	cluster bool
	simple  *redis.Options
	cl      *redis.ClusterOptions
	fail    *redis.FailoverOptions
	own     redis.UniversalClient
}

// newConnection parses what is left of the URL once this package's own
// parameters are taken out, with go-redis's parser for the kind of
// deployment the URL names. tlsCfg, when set, replaces the URL's TLS.
func newConnection(u *url.URL, q *brokerconf.Query, tlsCfg *tls.Config, dialTimeout time.Duration) (*connection, error) {
	var cluster bool
	if err := q.Bool(&cluster, paramCluster); err != nil {
		return nil, err
	}
	var master string
	q.String(&master, paramSentinelMaster)
	var files brokerconf.TLSFiles
	q.TLSFiles(&files, nil)
	if !files.IsZero() && u.Scheme != "rediss" {
		return nil, configErrorf("URL %q has TLS parameters (tls_ca, tls_cert, ...) but scheme redis://; use rediss:// for TLS", redactedWithoutQuery(u))
	}
	tlsCfg, err := brokerconf.ResolveTLS(tlsCfg, files, u.Scheme == "rediss", configErrorf)
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil && tlsCfg.ServerName == "" && !tlsCfg.InsecureSkipVerify {
		// As go-redis does: the name checked is the URL's host, also for
		// the nodes a Cluster or Sentinel names by address.
		tlsCfg.ServerName = u.Hostname()
	}
	rest := *u
	rest.RawQuery = brokerconf.Without("?"+u.RawQuery, func(name string) bool {
		return name == paramCluster || name == paramSentinelMaster || strings.HasPrefix(name, "tls_") || ownParam(name)
	})
	rest.RawQuery = strings.TrimPrefix(rest.RawQuery, "?")
	c := &connection{addr: u.Host, cluster: cluster}
	switch {
	case cluster && master != "":
		return nil, configErrorf("URL parameters cluster=true and sentinel_master=%q go to different deployments; give one", master)
	case cluster:
		c.cl, err = redis.ParseClusterURL(rest.String())
	case master != "":
		c.fail, err = failoverOptions(&rest, master)
	default:
		c.simple, err = redis.ParseURL(rest.String())
	}
	if err != nil {
		return nil, configErrorf("URL %q: %v (see the package documentation for the parameters this package accepts; the others are go-redis options such as dial_timeout)", redactedWithoutQuery(u), err)
	}
	c.apply(tlsCfg, dialTimeout)
	return c, nil
}

// failoverOptions reads a Sentinel URL: its hosts are the sentinels, its
// user and password those of the master (go-redis would take them for the
// sentinels').
func failoverOptions(u *url.URL, master string) (*redis.FailoverOptions, error) {
	q := u.Query()
	q.Set("master_name", master)
	u.RawQuery = q.Encode()
	o, err := redis.ParseFailoverURL(u.String())
	if err != nil {
		return nil, err
	}
	o.Username, o.Password = o.SentinelUsername, o.SentinelPassword
	o.SentinelUsername, o.SentinelPassword = "", ""
	return o, nil
}

// apply sets what this package sets on every client: the TLS
// configuration, the dial timeout, calls bounded by their context, and
// fewer dial retries (go-redis dials up to 5 times per command attempt and
// retries a command 3 times: 20 dials before a down server shows; the relay
// has its own backoff for an unavailable broker).
func (c *connection) apply(tlsCfg *tls.Config, dialTimeout time.Duration) {
	switch {
	case c.simple != nil:
		c.simple.TLSConfig, c.simple.ContextTimeoutEnabled, c.simple.DialerRetries = tlsCfg, true, 2
		if dialTimeout > 0 {
			c.simple.DialTimeout = dialTimeout
		}
	case c.cl != nil:
		c.cl.TLSConfig, c.cl.ContextTimeoutEnabled, c.cl.DialerRetries = tlsCfg, true, 2
		if dialTimeout > 0 {
			c.cl.DialTimeout = dialTimeout
		}
	case c.fail != nil:
		c.fail.TLSConfig, c.fail.ContextTimeoutEnabled, c.fail.DialerRetries = tlsCfg, true, 2
		if dialTimeout > 0 {
			c.fail.DialTimeout = dialTimeout
		}
	}
}

// client returns a new client, or the caller's; owned says whether Close
// should close it.
func (c *connection) client() (rdb redis.UniversalClient, owned bool) {
	switch {
	case c.own != nil:
		return c.own, false
	case c.cl != nil:
		return redis.NewClusterClient(c.cl), true
	case c.fail != nil:
		return redis.NewFailoverClient(c.fail), true
	}
	return redis.NewClient(c.simple), true
}

// hashTag returns the part of key that Redis Cluster hashes: the text
// between the first "{" and the next "}" when that is not empty, else key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// ParseURL returns the PublisherConfig that a Redis URL describes, for a
// caller that takes the URL from the command line and then sets fields in
// Go: stream and maxlen move into their fields, the TLS parameters into TLS
// (loaded), and URL keeps the rest (the server, the credentials, cluster,
// sentinel_master and go-redis's own parameters). A field changed afterwards
// wins. Errors satisfy errors.Is(err, ErrConfig) and never show the password.
func ParseURL(raw string) (PublisherConfig, error) {
	c, p, err := parseURL(raw, nil, 0)
	if err != nil {
		return PublisherConfig{}, err
	}
	cfg := PublisherConfig{Stream: p.stream, MaxLen: p.maxLen}
	switch {
	case c.simple != nil:
		cfg.TLS = c.simple.TLSConfig
	case c.cl != nil:
		cfg.TLS = c.cl.TLSConfig
	case c.fail != nil:
		cfg.TLS = c.fail.TLSConfig
	}
	cfg.URL = brokerconf.Without(raw, func(name string) bool { return ownParam(name) || strings.HasPrefix(name, "tls_") })
	return cfg, nil
}

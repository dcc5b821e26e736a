// Package brokers opens the publisher of a --broker URL for the commands of
// cmd/outbox: a broker adapter (NATS, RabbitMQ, Kafka, Redis, MQTT), a
// webhook or discard:, with the --broker-tls-* flags, and never shows a
// password in an error.
package brokers

import (
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"io"
	"log/slog"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
	"github.com/outbox-go/outbox/broker/outboxkafka"
	"github.com/outbox-go/outbox/broker/outboxmqtt"
	"github.com/outbox-go/outbox/broker/outboxnats"
	"github.com/outbox-go/outbox/broker/outboxredis"
	"github.com/outbox-go/outbox/internal/benchbaseline"
)

// closingPublisher is what every broker adapter's Publisher is.
type closingPublisher interface {
	outbox.Publisher
	io.Closer
}

// Adapter opens one broker's publisher from a --broker URL and measures
// the broker's own acked publish rate for `outbox bench`.
type Adapter struct {
	Name     string                                                                  // for messages: "NATS JetStream", "RabbitMQ"
	Open     func(ctx context.Context, url, source string) (closingPublisher, error) // with a CloudEvents source
	Baseline benchbaseline.Func                                                      // the broker's own publish loop, for the bench
}

// Adapters maps a --broker URL scheme to its adapter (DESIGN §3).
var Adapters = map[string]Adapter{}

// IsBrokerURL reports whether rawURL names one of the Adapters (not the
// webhook or discard:).
func IsBrokerURL(rawURL string) bool {
	scheme, _, _ := strings.Cut(rawURL, ":")
	_, ok := Adapters[strings.ToLower(scheme)]
	return ok
}

// TLSFlags are the --broker-tls-* flags: the TLS files of the broker
// connection, for every broker and the webhook.
type TLSFlags struct{ ca, cert, key, serverName string }

// AddTLSFlags defines the --broker-tls-* flags on f and returns their values.
func AddTLSFlags(f *cli.FlagSet) *TLSFlags {
	b := &TLSFlags{}
	f.StringVar(&b.ca, "broker-tls-ca", "", "PATH",
		"PEM file of the CA(s) that sign the broker's certificate, for every broker and the webhook (the URL parameter tls_ca, which wins)")
	f.StringVar(&b.cert, "broker-tls-cert", "", "PATH", "PEM file of the client certificate shown to the broker (tls_cert); needs --broker-tls-key")
	f.StringVar(&b.key, "broker-tls-key", "", "PATH", "PEM file of the client certificate's key (tls_key)")
	f.StringVar(&b.serverName, "broker-tls-server-name", "", "NAME", "name checked in the broker's certificate, when it is not the URL's host (tls_server_name)")
	return b
}

// Apply adds the flags to rawURL as its TLS query parameters, unless the
// URL sets them itself (as tls_* or, for RabbitMQ, cacertfile, certfile,
// keyfile, server_name_indication). The adapters then treat them as their
// own: they turn TLS on for Kafka and NATS, and are refused with a scheme
// that is not TLS (redis://, amqp://, mqtt://, http://).
func (b *TLSFlags) Apply(rawURL string) string {
	if strings.HasPrefix(rawURL, "discard:") {
		return rawURL
	}
	query := ""
	if i := strings.LastIndexByte(rawURL, '?'); i >= 0 {
		query = rawURL[i+1:]
	}
	have, _ := url.ParseQuery(query)
	var add []string
	for _, p := range []struct{ name, alias, value string }{
		{"tls_ca", "cacertfile", b.ca}, {"tls_cert", "certfile", b.cert},
		{"tls_key", "keyfile", b.key}, {"tls_server_name", "server_name_indication", b.serverName},
	} {
		if p.value != "" && !have.Has(p.name) && !have.Has(p.alias) {
			add = append(add, p.name+"="+url.QueryEscape(p.value))
		}
	}
	if len(add) == 0 {
		return rawURL
	}
	sep := "?"
	if strings.Contains(rawURL, "?") {
		sep = "&"
	}
	return rawURL + sep + strings.Join(add, "&")
}

// redisLogger sends go-redis's own messages (a failed dial, repeated for
// every attempt) to the debug log: the adapter already reports what matters
// as errors, on one line.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	slog.DebugContext(ctx, "redis client: "+cli.OneLine(fmt.Sprintf(format, v...)))
}

// mustBaseline is the bench baseline that the adapter of scheme registered
// when its package was initialised; it panics when there is none.
func mustBaseline(scheme string) benchbaseline.Func {
	fn, ok := benchbaseline.Lookup(scheme)
	if !ok {
		panic("outbox: no bench baseline registered for " + scheme + ":")
	}
	return fn
}

func init() {
	redis.SetLogger(redisLogger{})
	for _, b := range []struct {
		schemes []string
		adapter Adapter
	}{
		{[]string{"nats", "tls"}, Adapter{"NATS JetStream",
			func(ctx context.Context, url, source string) (closingPublisher, error) {
				return outboxnats.NewPublisher(ctx, outboxnats.PublisherConfig{URL: url, Source: source})
			}, mustBaseline("nats")}},
		{[]string{"amqp", "amqps"}, Adapter{"RabbitMQ",
			func(ctx context.Context, url, source string) (closingPublisher, error) {
				return outboxamqp.NewPublisher(ctx, outboxamqp.PublisherConfig{URL: url, Source: source})
			}, mustBaseline("amqp")}},
		{[]string{"kafka"}, Adapter{"Kafka",
			func(ctx context.Context, url, source string) (closingPublisher, error) {
				return outboxkafka.NewPublisher(ctx, outboxkafka.PublisherConfig{URL: url, Source: source})
			}, mustBaseline("kafka")}},
		{[]string{"redis", "rediss"}, Adapter{"Redis Streams",
			func(ctx context.Context, url, source string) (closingPublisher, error) {
				return outboxredis.NewPublisher(ctx, outboxredis.PublisherConfig{URL: url, Source: source})
			}, mustBaseline("redis")}},
		{[]string{"mqtt", "mqtts"}, Adapter{"MQTT",
			func(ctx context.Context, url, source string) (closingPublisher, error) {
				return outboxmqtt.NewPublisher(ctx, outboxmqtt.PublisherConfig{URL: url, Source: source})
			}, mustBaseline("mqtt")}},
	} {
		for _, s := range b.schemes {
			Adapters[s] = b.adapter
		}
	}
}

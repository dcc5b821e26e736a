package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
	"github.com/outbox-go/outbox/broker/outboxkafka"
	"github.com/outbox-go/outbox/broker/outboxmqtt"
	"github.com/outbox-go/outbox/broker/outboxnats"
	"github.com/outbox-go/outbox/broker/outboxredis"
)

// closingPublisher is what every broker adapter's Publisher is.
type closingPublisher interface {
	outbox.Publisher
	io.Closer
}

// brokerAdapter opens one broker's publisher from a --broker URL and measures
// the broker's own acked publish rate for `outbox bench`.
type brokerAdapter struct {
	name     string
	open     func(ctx context.Context, url, source string) (closingPublisher, error)
	baseline func(ctx context.Context, url, topic string, n, payloadBytes, window int) (time.Duration, error)
}

// brokers maps a --broker URL scheme to its adapter (DESIGN §3).
var brokers = map[string]brokerAdapter{}

// isBrokerURL reports whether rawURL names one of the brokers above (not the
// webhook or discard:).
func isBrokerURL(rawURL string) bool {
	scheme, _, _ := strings.Cut(rawURL, ":")
	_, ok := brokers[strings.ToLower(scheme)]
	return ok
}

// redisLogger sends go-redis's own messages (a failed dial, repeated for
// every attempt) to the debug log: the adapter already reports what matters
// as errors, on one line.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	slog.DebugContext(ctx, "redis client: "+oneLine(fmt.Sprintf(format, v...)))
}

func init() {
	redis.SetLogger(redisLogger{})
	for _, b := range []struct {
		schemes []string
		adapter brokerAdapter
	}{
		{[]string{"nats"}, brokerAdapter{"NATS JetStream",
			func(ctx context.Context, url, source string) (closingPublisher, error) {
				return outboxnats.NewPublisher(ctx, outboxnats.PublisherConfig{URL: url, Source: source})
			}, outboxnats.Baseline}},
		{[]string{"amqp", "amqps"}, brokerAdapter{"RabbitMQ",
			func(ctx context.Context, url, source string) (closingPublisher, error) {
				return outboxamqp.NewPublisher(ctx, outboxamqp.PublisherConfig{URL: url, Source: source})
			}, outboxamqp.Baseline}},
		{[]string{"kafka"}, brokerAdapter{"Kafka",
			func(ctx context.Context, url, source string) (closingPublisher, error) {
				return outboxkafka.NewPublisher(ctx, outboxkafka.PublisherConfig{URL: url, Source: source})
			}, outboxkafka.Baseline}},
		{[]string{"redis", "rediss"}, brokerAdapter{"Redis Streams",
			func(ctx context.Context, url, source string) (closingPublisher, error) {
				return outboxredis.NewPublisher(ctx, outboxredis.PublisherConfig{URL: url, Source: source})
			}, outboxredis.Baseline}},
		{[]string{"mqtt", "mqtts"}, brokerAdapter{"MQTT",
			func(ctx context.Context, url, source string) (closingPublisher, error) {
				return outboxmqtt.NewPublisher(ctx, outboxmqtt.PublisherConfig{URL: url, Source: source})
			}, outboxmqtt.Baseline}},
	} {
		for _, s := range b.schemes {
			brokers[s] = b.adapter
		}
	}
}

package tracing

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxredis"
	"github.com/outbox-go/outbox/plugin/outboxotel"
)

// TestRedisCarriesTraceContext publishes through the Redis Streams
// publisher and consumes with its subscriber.
func TestRedisCarriesTraceContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := setup(t)
	opts, err := redis.ParseURL(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer func() { _ = rdb.Close() }()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s is required (set OUTBOX_REDIS_URL): %v", redisURL(), err)
	}
	prefix := "otel:" + uniqueID(t)
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), prefix+":*").Result()
		if len(keys) > 0 {
			_ = rdb.Del(context.Background(), keys...).Err()
		}
	})
	const topic = "order.paid"
	template := prefix + ":{topic}"
	sub, err := outboxredis.NewSubscriber(ctx, outboxredis.SubscriberConfig{URL: redisURL(), Group: "billing", Topic: topic, Stream: template})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Close() }()
	pub, err := outboxredis.NewPublisher(ctx, outboxredis.PublisherConfig{URL: redisURL(), Stream: template})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Close() }()

	sent, producer := tracedMessage(t, b, topic)
	if errs := pub.Publish(ctx, []outbox.Message{sent}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
	var got outbox.Message
	var inside trace.SpanContext
	rctx, stop := context.WithCancel(ctx)
	err = sub.Run(rctx, outboxotel.Handler(func(ctx context.Context, m outbox.Message) error {
		got, inside = m, trace.SpanContextFromContext(ctx)
		stop()
		return nil
	}, append(b.opts, outboxotel.WithSystem("redis"))...))
	stop()
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("timed out waiting for the message")
	}
	checkReceived(t, b, sent, got, inside, producer)
}

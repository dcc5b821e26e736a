package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

// PublishBatches is the loop of an adapter's publish benchmark: it resets
// the timer, publishes b.N messages through pub in batches of len(batch),
// as the relay does, fails the benchmark on any error, and returns how long
// that took. refill, when not nil, rewrites the batch before each Publish
// (sent: the messages published so far), for a broker that drops a msg_id
// it has seen; otherwise the same messages go again.
func PublishBatches(ctx context.Context, b *testing.B, pub outbox.Publisher, batch []outbox.Message, refill func(batch []outbox.Message, sent int)) time.Duration {
	b.Helper()
	b.ResetTimer()
	start := time.Now()
	for sent := 0; sent < b.N; sent += len(batch) {
		if refill != nil {
			refill(batch, sent)
		}
		if errs := pub.Publish(ctx, batch[:min(len(batch), b.N-sent)]); errs != nil {
			b.Fatal(errs)
		}
	}
	return time.Since(start)
}

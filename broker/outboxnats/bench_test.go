package outboxnats

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

// BenchmarkPublish compares the Publisher, which sends each message with its
// CloudEvents headers, with Baseline (the bare client, Nats-Msg-Id only), in
// batches of 500 messages of 200 bytes on the shared server, alternating
// rounds so that both see the same load:
//
//	go test -run '^$' -bench Publish -benchtime 100000x -count 5
func BenchmarkPublish(b *testing.B) {
	requireShared(b)
	u, _ := testURL(b, sharedURL())
	ctx := context.Background()
	b.Run("publisher", func(b *testing.B) {
		pub, err := NewPublisher(ctx, PublisherConfig{URL: u})
		if err != nil {
			b.Fatal(err)
		}
		defer pub.Close()
		payload := json.RawMessage(`"` + strings.Repeat("x", 198) + `"`)
		run := time.Now().UnixNano()
		batch := make([]outbox.Message, 500)
		b.ResetTimer()
		start := time.Now()
		for sent := 0; sent < b.N; sent += len(batch) {
			for i := range batch {
				batch[i] = outbox.Message{ID: int64(sent + i + 1), MsgID: fmt.Sprintf("%d-%d", run, sent+i), Topic: "bench",
					Payload: payload, CreatedAt: time.Now()}
			}
			if errs := pub.Publish(ctx, batch[:min(len(batch), b.N-sent)]); errs != nil {
				b.Fatal(errs)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	})
	b.Run("baseline", func(b *testing.B) {
		d, err := Baseline(ctx, u, "bench", b.N, 200, 500)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/d.Seconds(), "msgs/s")
	})
}

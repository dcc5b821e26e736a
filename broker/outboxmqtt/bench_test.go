package outboxmqtt

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/brokertest"
)

// BenchmarkPublish measures the Publisher in batches of 500 messages of
// 200 bytes without keys, for several windows, on the shared broker (no
// set_tcp_nodelay) and on a private one with set_tcp_nodelay true:
//
//	go test -run '^$' -bench Publish -benchtime 20000x
func BenchmarkPublish(b *testing.B) {
	private := startMosquitto(b, "")
	for _, broker := range []struct{ name, url string }{{"shared", sharedURL}, {"nodelay", private.URL()}} {
		for _, window := range []int{1, 5, 10, 20} {
			b.Run(fmt.Sprintf("%s/window=%d", broker.name, window), func(b *testing.B) {
				ctx := context.Background()
				pub, err := NewPublisher(ctx, PublisherConfig{URL: broker.url, Window: window, NoSubscribers: NoSubscribersOK})
				if err != nil {
					b.Fatal(err)
				}
				defer pub.Close()
				payload := json.RawMessage(`{"pad":"` + strings.Repeat("x", 190) + `"}`)
				batch := make([]outbox.Message, 500)
				for i := range batch {
					batch[i] = outbox.Message{MsgID: fmt.Sprint(i), Topic: "bench", Payload: payload}
				}
				d := brokertest.PublishBatches(ctx, b, pub, batch, nil)
				b.ReportMetric(float64(b.N)/d.Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkPublisherVsBaseline compares the Publisher (CloudEvents user
// properties, a window per Publish call) with baseline (the bare client, one
// window across all messages) on the shared broker, 200-byte payloads in
// batches of 500:
//
//	go test -run '^$' -bench PublisherVsBaseline -benchtime 50000x -count 3
func BenchmarkPublisherVsBaseline(b *testing.B) {
	ctx := context.Background()
	u := sharedURL + "?topic=bench/{topic}&no_subscribers=ok"
	b.Run("publisher", func(b *testing.B) {
		pub, err := NewPublisher(ctx, PublisherConfig{URL: u})
		if err != nil {
			b.Fatal(err)
		}
		defer pub.Close()
		payload := json.RawMessage(`"` + strings.Repeat("x", 198) + `"`)
		batch := make([]outbox.Message, 500)
		for i := range batch {
			batch[i] = outbox.Message{ID: int64(i + 1), MsgID: fmt.Sprint(i), Topic: "bench", Payload: payload, CreatedAt: time.Now()}
		}
		d := brokertest.PublishBatches(ctx, b, pub, batch, nil)
		b.ReportMetric(float64(b.N)/d.Seconds(), "msgs/s")
	})
	b.Run("baseline", func(b *testing.B) {
		d, err := baseline(ctx, u, "bench", b.N, 200, 500)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/d.Seconds(), "msgs/s")
	})
}

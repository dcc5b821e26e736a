package outboxnats

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

// BenchmarkPublish compares the Publisher, which sends each message with its
// CloudEvents headers, with baseline (the bare client, Nats-Msg-Id only), in
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
		// Fresh msg_ids for every batch: JetStream drops the ones it has seen.
		d := brokertest.PublishBatches(ctx, b, pub, make([]outbox.Message, 500), func(batch []outbox.Message, sent int) {
			for i := range batch {
				batch[i] = outbox.Message{ID: int64(sent + i + 1), MsgID: fmt.Sprintf("%d-%d", run, sent+i), Topic: "bench",
					Payload: payload, CreatedAt: time.Now()}
			}
		})
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

// BenchmarkEventHeader measures building one message's headers, which the
// Publisher does for every message of a batch:
//
//	go test -run '^$' -bench EventHeader -benchmem
func BenchmarkEventHeader(b *testing.B) {
	m := outbox.Message{ID: 1, MsgID: "bench-1", Topic: "orders", Key: "k1",
		Payload: json.RawMessage(`"` + strings.Repeat("x", 198) + `"`), CreatedAt: time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		if h := eventHeader(&m, "/outbox"); len(h) == 0 {
			b.Fatal("no headers")
		}
	}
}

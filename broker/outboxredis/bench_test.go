package outboxredis

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

// BenchmarkPublish publishes batches of 500 messages of 200 bytes, as the
// relay does, and reports the rate beside baseline's over the same number of
// messages. Run it briefly: go test -run X -bench Publish -benchtime 20000x.
func BenchmarkPublish(b *testing.B) {
	rdb := sharedClient(b)
	prefix := uniquePrefix(b, rdb)
	pub, err := NewPublisher(context.Background(), PublisherConfig{URL: sharedURL, Stream: prefix + ":{topic}"})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = pub.Close() }()
	const batch = 500
	payload := json.RawMessage(`"` + strings.Repeat("x", 198) + `"`)
	msgs := make([]outbox.Message, batch)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("bench-%d", i), Topic: "bench", Key: fmt.Sprintf("k%d", i%16), Payload: payload, CreatedAt: time.Now()}
	}
	ctx := context.Background()
	elapsed := brokertest.PublishBatches(ctx, b, pub, msgs, nil)
	b.StopTimer()
	base, err := baseline(ctx, sharedURL+"?stream="+prefix+":{topic}", "baseline", b.N, 200, batch)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(b.N)/base.Seconds(), "baseline-msgs/s")
}

// BenchmarkXAddArgs measures building one message's XADD arguments, which
// the Publisher does for every message of a batch:
//
//	go test -run '^$' -bench XAddArgs -benchmem
func BenchmarkXAddArgs(b *testing.B) {
	p := &Publisher{source: "/outbox", stream: "outbox:{topic}", maxLen: 100000}
	m := outbox.Message{ID: 1, MsgID: "bench-1", Topic: "orders", Key: "k1",
		Payload: json.RawMessage(`"` + strings.Repeat("x", 198) + `"`), CreatedAt: time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		if a := p.xaddArgs(&m, p.Stream(m.Topic)); len(a.Values.([]any)) == 0 {
			b.Fatal("no values")
		}
	}
}

package outboxkafka

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
	"github.com/outbox-go/outbox/internal/benchbaseline"
)

// init registers baseline for `outbox bench` through kafka:// URLs.
func init() {
	benchbaseline.Register("kafka", baseline)
}

// baseline publishes n messages of payloadBytes bytes to the destination of
// topic with the bare client, in windows of `window` (async produce, then wait
// for all acks), and returns how long that took. It is the broker's own acked
// publish rate, against which the relay's rate is a ratio. The client is set
// up as the Publisher's (acks=all, idempotent, no linger, the URL's
// compression), and each record is the Publisher's record of a message of
// topic without a key (as the bench's rows): the CloudEvents attributes as
// ce_ headers and content-type, built once, each record only getting its own
// ce_id, so that the loop measures the client and the broker, not the
// encoding. The topic must exist, or the URL must allow auto_create.
func baseline(ctx context.Context, brokerURL, topic string, n, payloadBytes, window int) (time.Duration, error) {
	if n <= 0 || payloadBytes < 0 || window <= 0 {
		return 0, configError("baseline needs n > 0, payloadBytes >= 0 and window > 0; got %d, %d, %d", n, payloadBytes, window)
	}
	c, err := parseURL(brokerURL)
	if err != nil {
		return 0, err
	}
	if err := c.common("", 0, 0, 0, "", nil, nil); err != nil {
		return 0, err
	}
	var dest, source string
	c.q.String(&dest, "topic")
	c.q.String(&source, "source")
	dest = template(def(dest, DefaultDestination)).render(topic)
	if reason := validTopic(dest); reason != "" {
		return 0, configError("topic %q becomes %q, which is not a valid Kafka topic name: %s", topic, dest, reason)
	}
	state := &connState{}
	cl, err := c.newClient(ctx, state)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	payload := baselinePayload(payloadBytes)
	template := newRecord(&outbox.Message{MsgID: "baseline", Topic: topic, Payload: payload, CreatedAt: time.Now()}, dest, def(source, DefaultSource))
	idAt := slices.IndexFunc(template.Headers, func(h kgo.RecordHeader) bool { return h.Key == headerPrefix+cloudevents.ID })

	var (
		mu       sync.Mutex
		firstErr error
	)
	start := time.Now()
	for sent := 0; sent < n; {
		batch := min(window, n-sent)
		var wg sync.WaitGroup
		wg.Add(batch)
		for i := range batch {
			r := &kgo.Record{Topic: dest, Value: payload, Headers: slices.Clone(template.Headers)}
			r.Headers[idAt].Value = strconv.AppendInt(nil, int64(sent+i), 10)
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = classify(err, dest, state)
					}
					mu.Unlock()
				}
				wg.Done()
			})
		}
		wg.Wait()
		if firstErr != nil {
			return 0, firstErr
		}
		sent += batch
	}
	return time.Since(start), nil
}

// baselinePayload is a JSON object of exactly size bytes (at least 10).
func baselinePayload(size int) []byte {
	const frame = `{"p":""}`
	fill := max(size-len(frame), 2)
	return []byte(`{"p":"` + strings.Repeat("x", fill) + `"}`)
}

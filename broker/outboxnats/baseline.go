package outboxnats

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
	"github.com/outbox-go/outbox/internal/benchbaseline"
)

// init registers baseline for `outbox bench` through nats://, tls:// URLs.
func init() {
	benchbaseline.Register("nats", baseline)
	benchbaseline.Register("tls", baseline)
}

// baseline publishes n messages of payloadBytes bytes to the destination of
// topic with the bare client, in windows of `window` (PublishMsgAsync with
// the Publisher's headers, each message with its own Nats-Msg-Id, then wait
// for every PubAck of the window), and returns how long that took. It is the broker's own acked publish rate, against
// which the relay's rate is a ratio. brokerURL is read as for a Publisher,
// and the stream is created the same way when it is missing.
func baseline(ctx context.Context, brokerURL, topic string, n, payloadBytes, window int) (time.Duration, error) {
	if n <= 0 || payloadBytes < 2 || window <= 0 {
		return 0, fmt.Errorf("outboxnats: baseline needs n > 0, payloadBytes >= 2 and window > 0; got %d, %d, %d", n, payloadBytes, window)
	}
	st, err := PublisherConfig{URL: brokerURL}.settings()
	if err != nil {
		return 0, err
	}
	subject := st.prefix + topic
	if err := checkSubject(subject); err != nil {
		return 0, fmt.Errorf("outboxnats: topic %q makes the subject %q, which %v", topic, subject, err)
	}
	nc, err := connect(ctx, st.url, "outbox baseline", st.auth(), st.DialTimeout)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := newJetStream(nc, st.Timeout)
	if err != nil {
		return 0, fmt.Errorf("outboxnats: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, st.Timeout)
	_, err = ensureStream(sctx, js, st.streamConfig(), "subjects the baseline writes to")
	cancel()
	if err != nil {
		return 0, err
	}
	// A JSON string of exactly payloadBytes bytes.
	payload := []byte(`"` + strings.Repeat("x", payloadBytes-2) + `"`)
	// Ids unique per run, so that the stream's dedup window keeps nothing out.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	// The headers are the Publisher's (the CloudEvents attributes,
	// content-type, Nats-Msg-Id), built once; each message only gets its own
	// id, so that the loop measures the client and the server, not the
	// encoding.
	base := outbox.Message{MsgID: "baseline", Topic: topic, Payload: payload, CreatedAt: time.Now()}
	template := eventHeader(&base, encodeValue(st.Source))
	futures := make([]jetstream.PubAckFuture, 0, window)
	start := time.Now()
	for sent := 0; sent < n; {
		futures = futures[:0]
		for ; sent < n && len(futures) < window; sent++ {
			id := run + "-" + strconv.Itoa(sent)
			h := maps.Clone(template)
			h[headerPrefix+cloudevents.ID], h[headerMsgID] = []string{id}, []string{id}
			msg := &nats.Msg{Subject: subject, Data: payload, Header: h}
			f, err := js.PublishMsgAsync(msg)
			if err != nil {
				return 0, jsError("baseline publish", err)
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return 0, jsError("baseline PubAck", err)
			case <-ctx.Done():
				return 0, outbox.Unavailable(fmt.Errorf("outboxnats: baseline: %w", ctx.Err()))
			}
		}
	}
	return time.Since(start), nil
}

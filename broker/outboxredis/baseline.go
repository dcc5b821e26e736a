package outboxredis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
	"github.com/outbox-go/outbox/internal/benchbaseline"
)

// init registers baseline for `outbox bench` through redis://, rediss:// URLs.
func init() {
	benchbaseline.Register("redis", baseline)
	benchbaseline.Register("rediss", baseline)
}

// baseline publishes n messages of payloadBytes bytes to the stream of topic
// with the bare go-redis client, in windows of window (one pipeline of XADD
// commands, then all the replies), and returns how long that took. It is
// Redis's own acked publish rate, against which the relay's rate is a ratio.
// The entries have the same fields as the Publisher's (see the package
// documentation), so the two rates differ only by the adapter's own work.
// The entries stay in the stream: point it at a topic nobody consumes.
func baseline(ctx context.Context, brokerURL, topic string, n, payloadBytes, window int) (time.Duration, error) {
	if n < 0 || payloadBytes < 2 || window < 1 {
		return 0, fmt.Errorf("outboxredis: baseline: n=%d payloadBytes=%d window=%d; want n >= 0, payloadBytes >= 2 (a JSON string), window >= 1", n, payloadBytes, window)
	}
	cfg, conn, err := PublisherConfig{URL: brokerURL}.resolve()
	if err != nil {
		return 0, err
	}
	rdb, _ := conn.client()
	defer func() { _ = rdb.Close() }()
	if err := ping(ctx, rdb, conn.addr); err != nil {
		return 0, err
	}
	stream := streamKey(cfg.Stream, topic)
	payload := []byte(`"` + strings.Repeat("x", payloadBytes-2) + `"`)
	// The fields are built once; each message only gets its own id, so
	// that the loop measures the client and Redis, not the encoding.
	base := outbox.Message{MsgID: "baseline", Topic: topic, Payload: payload, CreatedAt: time.Now()}
	template := entryValues(&base, cloudevents.DefaultSource)
	idAt := slices.Index(template, any(AttributePrefix+cloudevents.ID)) + 1

	start := time.Now()
	for sent := 0; sent < n; {
		size := min(window, n-sent)
		pipe := rdb.Pipeline()
		for i := range size {
			vals := slices.Clone(template)
			vals[idAt] = "baseline-" + strconv.Itoa(sent+i)
			a := &redis.XAddArgs{Stream: stream, ID: "*", Values: vals}
			if cfg.MaxLen > 0 {
				a.MaxLen, a.Approx = cfg.MaxLen, true
			}
			pipe.XAdd(ctx, a)
		}
		cmds, err := pipe.Exec(ctx)
		if err != nil {
			for _, c := range cmds {
				if c.Err() != nil {
					err = c.Err()
					break
				}
			}
			if unavailable(err) {
				err = outbox.Unavailable(err)
			}
			return time.Since(start), errors.Join(fmt.Errorf("outboxredis: baseline: XADD %s after %d acked messages", stream, sent), err)
		}
		sent += size
	}
	return time.Since(start), nil
}

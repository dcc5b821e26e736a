package outboxamqp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
	"github.com/outbox-go/outbox/internal/benchbaseline"
)

// init registers baseline for `outbox bench` through amqp://, amqps:// URLs.
func init() {
	benchbaseline.Register("amqp", baseline)
	benchbaseline.Register("amqps", baseline)
}

// baseline publishes n messages of payloadBytes bytes to the destination of
// topic with the bare client, in windows of window messages (publish the
// window, then wait for all its confirms), and returns how long that took. It
// is RabbitMQ's own acked publish rate, against which the relay's rate is a
// ratio. It publishes as the Publisher does (exchange and routing key from
// brokerURL's parameters, confirms, mandatory, persistent, the same
// message), so a queue must be bound to receive the messages: a returned
// message fails the run.
func baseline(ctx context.Context, brokerURL, topic string, n, payloadBytes, window int) (time.Duration, error) {
	s, err := PublisherConfig{URL: brokerURL}.settings()
	if err != nil {
		return 0, err
	}
	if n <= 0 || payloadBytes < 2 || window <= 0 {
		return 0, fmt.Errorf("%w: baseline needs n > 0, payloadBytes >= 2 and window > 0 (got %d, %d, %d)", ErrConfig, n, payloadBytes, window)
	}
	conn, err := s.dial(ctx, "outbox baseline")
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, outbox.Unavailable(err)
	}
	if err := declareExchange(ch, s.exchange, s.kind, s.noDeclare); err != nil {
		return 0, err
	}
	if err := ch.Confirm(false); err != nil {
		return 0, outbox.Unavailable(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, window))
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	var returned atomic.Int64
	go func() {
		for range returns {
			returned.Add(1)
		}
	}()
	// A JSON string of payloadBytes bytes.
	body := []byte(`"` + strings.Repeat("x", payloadBytes-2) + `"`)
	key := strings.ReplaceAll(s.routingKey, "{topic}", topic)
	// The message is the Publisher's (the CloudEvents attributes as
	// headers, content-type, message-id, persistent), built once; each
	// message only gets its own id, so that the loop measures the client
	// and the broker, not the encoding.
	template := publishing(&outbox.Message{MsgID: "baseline", Topic: topic, Payload: body, CreatedAt: time.Now()}, s.source)
	start := time.Now()
	for sent := 0; sent < n; {
		w := min(window, n-sent)
		for i := range w {
			pub := template
			pub.MessageId = "baseline-" + strconv.Itoa(sent+i)
			pub.Headers = maps.Clone(template.Headers)
			pub.Headers[AttributePrefix+cloudevents.ID] = pub.MessageId
			err := ch.PublishWithContext(ctx, s.exchange, key, true, false, pub)
			if err != nil {
				return 0, outbox.Unavailable(err)
			}
		}
		for range w {
			select {
			case c, ok := <-confirms:
				if !ok {
					return 0, outbox.Unavailable(errors.New("outboxamqp: baseline: the channel closed"))
				}
				if !c.Ack {
					return 0, fmt.Errorf("%w: baseline message %d", ErrNacked, c.DeliveryTag)
				}
			case <-ctx.Done():
				return 0, outbox.Unavailable(ctx.Err())
			}
		}
		sent += w
	}
	took := time.Since(start)
	if r := returned.Load(); r > 0 {
		return 0, fmt.Errorf("outboxamqp: baseline: %d of %d messages were returned unroutable: bind a queue to exchange %q with a key matching %q first (e.g. start a subscriber)", r, n, s.exchange, key)
	}
	return took, nil
}

package bench

import (
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/brokers"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"io"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox"
)

// benchTopic is the topic of every row the bench writes.
const benchTopic = "bench.event"

// brokerBench is the broker side of `outbox bench --broker <broker URL>`:
// the adapter, and the resources the bench made for itself.
type brokerBench struct {
	adapter brokers.Adapter
	url     string
	cleanup []func()
}

// newBrokerBench prepares a bench through a real broker. "kfake:" starts
// franz-go's in-process fake Kafka (there is no Kafka server here) and
// benches kafka:// against it. For RabbitMQ, whose mandatory publishes fail
// when no queue is bound, it binds a queue of its own that keeps at most
// 1000 messages (the oldest are dropped) and deletes it afterwards. For MQTT
// it accepts "no matching subscribers" answers.
// It returns nil for discard: and webhooks.
func newBrokerBench(ctx context.Context, rawURL string, stdout io.Writer) (*brokerBench, error) {
	scheme, _, _ := strings.Cut(rawURL, ":")
	scheme = strings.ToLower(scheme)
	b := &brokerBench{url: rawURL}
	switch scheme {
	case "kfake":
		addrs, stop, err := startKfake()
		if err != nil {
			return nil, fmt.Errorf("starting the in-process fake Kafka: %w", err)
		}
		b.cleanup = append(b.cleanup, stop)
		b.url = "kafka://" + strings.Join(addrs, ",") + "?auto_create=true"
		scheme = "kafka"
		fmt.Fprintf(stdout, "bench: kfake: franz-go's in-memory fake Kafka at %s (no disk, no replication: a client-side ceiling, not a Kafka figure)\n", b.url)
	case "mqtt", "mqtts":
		// Nobody subscribes during the bench, and mosquitto answers "no
		// matching subscribers", which the publisher counts as a refusal
		// unless told otherwise.
		if !strings.Contains(rawURL, "no_subscribers=") {
			sep := "?"
			if strings.Contains(rawURL, "?") {
				sep = "&"
			}
			b.url = rawURL + sep + "no_subscribers=ok"
			fmt.Fprintln(stdout, "bench: mqtt: added no_subscribers=ok to the URL (nobody subscribes during the bench)")
		}
	case "amqp", "amqps":
		drop, err := bindBenchQueue(ctx, rawURL)
		if err != nil {
			return nil, err
		}
		b.cleanup = append(b.cleanup, drop)
	}
	adapter, ok := brokers.Adapters[scheme]
	if !ok {
		b.close()
		return nil, nil
	}
	b.adapter = adapter
	return b, nil
}

func (b *brokerBench) close() {
	for i := len(b.cleanup) - 1; i >= 0; i-- {
		b.cleanup[i]()
	}
}

// baselineRate is the broker's own acked publish rate: the adapter's bare
// client publishing n messages of the bench's size in windows of the batch
// size.
func (b *brokerBench) baselineRate(ctx context.Context, o *benchOptions) (float64, cpuUse, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cpu := o.meter.sample()
	d, err := b.adapter.Baseline(ctx, b.url, benchTopic, o.messages, o.payloadBytes, o.batch)
	if err != nil {
		return 0, cpuUse{}, fmt.Errorf("%s baseline: %s", b.adapter.Name, cli.Scrub(cli.OneLine(err.Error())))
	}
	return float64(o.messages) / d.Seconds(), o.meter.since(cpu, int64(o.messages)), nil
}

// bindBenchQueue declares a queue bound to the URL's exchange with every
// routing key, so that the bench's mandatory publishes are routed; the queue
// drops its oldest messages beyond 1000 so that a long bench does not fill
// the broker. The returned function deletes it.
func bindBenchQueue(ctx context.Context, rawURL string) (func(), error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("--broker: %s", cli.Scrub(cli.UnwrapAll(err).Error()))
	}
	exchange := u.Query().Get("exchange")
	if exchange == "" {
		exchange = "outbox"
	}
	u.RawQuery = ""
	conn, err := amqp.DialConfig(u.String(), amqp.Config{Dial: amqp.DefaultDial(dbopen.ConnectTimeout)})
	if err != nil {
		return nil, outbox.Unavailable(fmt.Errorf("bench: connect to %s: %w", cli.RedactDSN(u.String()), err))
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, err
	}
	queue := "outbox-bench-" + randomPrefix()
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("bench: declare exchange %q: %w", exchange, err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{
		"x-max-length": int32(1000), "x-overflow": "drop-head",
	}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("bench: declare queue: %w", err)
	}
	if err := ch.QueueBind(queue, "#", exchange, false, nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("bench: bind queue: %w", err)
	}
	return func() {
		_, _ = ch.QueueDelete(queue, false, false, false)
		conn.Close()
	}, nil
}

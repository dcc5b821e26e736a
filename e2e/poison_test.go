package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
	"github.com/outbox-go/outbox/broker/outboxkafka"
	"github.com/outbox-go/outbox/brokertest"
	"github.com/outbox-go/outbox/webhook"
)

// A poison message is one row that the transport cannot carry, among normal
// ones: the broker closes the connection on it, or the client refuses it. It
// goes in by plain SQL, as a row the Writer would refuse (an older writer, a
// hand-made fix, another program). The relay must go on publishing the
// others, and the poison must end DEAD with its reason, within seconds.
const (
	poisonBefore = 100 // normal messages written before the poison
	poisonAfter  = 100 // and after it, before the relay starts
	poisonLive   = 100 // and while the relay runs
	// poisonBound bounds the time for every normal message to arrive, and
	// for the poison to end DEAD, after the relay starts.
	poisonBound = 30 * time.Second
	// poisonBudget is the tests' RetryBudget.
	poisonBudget = 2 * time.Second
)

// poisonCase is one transport and its poison.
type poisonCase struct {
	name  string
	topic string
	// pub returns the relay's publisher.
	pub func(t *testing.T) outbox.Publisher
	// listen starts reading what the transport delivers into a.
	listen func(t *testing.T, a *arrivals)
	// poison is the row; its topic, unless set, is set to topic.
	poison outbox.Message
}

func runPoison(t *testing.T, pc poisonCase) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := faultHarness(ctx, t, "poison_"+pc.name)
	a := newArrivals()
	pc.listen(t, a)

	prefix := "poison-" + pc.name
	ids := writeMessages(ctx, t, h, pc.topic, prefix, 0, poisonBefore)
	if pc.poison.Topic == "" {
		pc.poison.Topic = pc.topic
	}
	if pc.poison.Payload == nil {
		pc.poison.Payload = []byte(`{"poison":true}`)
	}
	insertRow(ctx, t, h, pc.poison)
	ids = append(ids, writeMessages(ctx, t, h, pc.topic, prefix, poisonBefore, poisonAfter)...)

	start := time.Now()
	faultRelay(t, h, pc.pub(t), poisonBudget)
	ids = append(ids, writeMessages(ctx, t, h, pc.topic, prefix, poisonBefore+poisonAfter, poisonLive)...)

	a.waitAll(t, ids, poisonBound, pc.name+": the messages beside the poison")
	delivered := time.Since(start)

	var st rowState
	for deadline := start.Add(poisonBound); ; {
		if st = readRow(ctx, t, h, pc.poison.MsgID); st.status == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st.status != 2 {
		t.Fatalf("%s: the poison %q is still status %d (retries %d, last error %q) %s after the relay started, not DEAD",
			pc.name, pc.poison.MsgID, st.status, st.retries, st.lastError, poisonBound)
	}
	if st.lastError == "" {
		t.Errorf("%s: the poison is DEAD with no reason in last_error", pc.name)
	}
	if n := countStatus(ctx, t, h, 2); n != 1 {
		t.Errorf("%s: %d DEAD rows, want only the poison", pc.name, n)
	}
	t.Logf("%s: %d messages beside the poison delivered in %s; the poison DEAD after %s, %d retries: %s",
		pc.name, len(ids), delivered.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), st.retries, st.lastError)
}

// TestPoisonAMQPHeader: a header value of 200 KB, over RabbitMQ's frame size
// (128 KB): the broker closes the connection on the frame.
func TestPoisonAMQPHeader(t *testing.T) {
	runPoison(t, amqpPoison(t, "amqp_header", outbox.Message{MsgID: "poison-big-header",
		Headers: map[string]string{"big": strings.Repeat("x", 200<<10)}}))
}

// TestPoisonAMQPMsgID: a msg_id of 64 four-byte characters, 256 bytes, over
// the 255 bytes of AMQP's short string (message-id).
func TestPoisonAMQPMsgID(t *testing.T) {
	runPoison(t, amqpPoison(t, "amqp_msgid", outbox.Message{MsgID: strings.Repeat("\U0001F600", 64)}))
}

// amqpPoison publishes to the machine's RabbitMQ on an exchange of the
// test's own, and deletes the exchange and the group's queue at the end.
func amqpPoison(t *testing.T, name string, poison outbox.Message) poisonCase {
	t.Helper()
	exchange := "e2e-" + name + "-" + randomHex(4)
	u := amqpURL() + "?exchange=" + exchange + "&reconnect_delay=200ms"
	b := amqpBroker(u)
	return poisonCase{
		name: name, topic: b.Topic, pub: b.NewPublisher, poison: poison,
		listen: func(t *testing.T, a *arrivals) {
			sub := b.NewSubscriber(t, "faults").(*outboxamqp.Subscriber)
			runSubscriber(t, b.Name, sub, a)
			t.Cleanup(func() { deleteAMQP(t, sub.Queue(), exchange) })
		},
	}
}

// amqpURL is the machine's RabbitMQ (OUTBOX_TEST_AMQP).
func amqpURL() string {
	if u := os.Getenv("OUTBOX_TEST_AMQP"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// deleteAMQP deletes a test's queue and exchange from the shared broker.
func deleteAMQP(t *testing.T, queue, exchange string) {
	conn, err := amqp.DialConfig(amqpURL(), amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Errorf("deleting queue %q and exchange %q: %v", queue, exchange, err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err == nil {
		_, err = ch.QueueDelete(queue, false, false, false)
	}
	if err == nil {
		err = ch.ExchangeDelete(exchange, false, false)
	}
	if err != nil {
		t.Errorf("deleting queue %q and exchange %q: %v", queue, exchange, err)
	}
}

// runSubscriber runs sub until the test ends, recording into a.
func runSubscriber(t *testing.T, name string, sub brokertest.Subscriber, a *arrivals) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx, a.handler()) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("%s subscriber did not stop within 30s", name)
		}
		closeIfCloser(sub)
	})
}

// TestPoisonNATS: a topic with CR/LF, which makes a subject that would end
// the NATS protocol line early. (A header value with CR/LF is no poison:
// header values travel percent-encoded.)
func TestPoisonNATS(t *testing.T) {
	srv := startPrivate(t, natsSpec)
	b := natsBroker("nats://" + srv.addr() + "?stream=POISON&subject=poison.{topic}&timeout=2s")
	runPoison(t, poisonCase{name: "nats", topic: b.Topic, pub: b.NewPublisher, listen: brokerReceiver(b),
		poison: outbox.Message{MsgID: "poison-crlf-topic", Topic: b.Topic + "\r\nPUB evil 1\r\nb"}})
}

// TestPoisonNATSPayload: a payload over the server's max_payload (1 MB), which
// the server would answer by closing the connection.
func TestPoisonNATSPayload(t *testing.T) {
	srv := startPrivate(t, natsSpec)
	b := natsBroker("nats://" + srv.addr() + "?stream=POISON&subject=poison.{topic}&timeout=2s")
	runPoison(t, poisonCase{name: "nats_payload", topic: b.Topic, pub: b.NewPublisher, listen: brokerReceiver(b),
		poison: outbox.Message{MsgID: "poison-big-payload", Payload: bigPayload(1200 << 10)}})
}

// TestPoisonMQTT: a msg_id with a tab.
func TestPoisonMQTT(t *testing.T) {
	srv := startPrivate(t, mosquittoSpec)
	b := mqttBroker("mqtt://" + srv.addr() + "?topic=poison/{topic}")
	runPoison(t, poisonCase{name: "mqtt", topic: b.Topic, pub: b.NewPublisher, listen: brokerReceiver(b),
		poison: outbox.Message{MsgID: "poison\twith-tab"}})
}

// TestPoisonRedis: a payload over the bulk length the server accepts (a
// private redis-server with proto-max-bulk-len at its least, 1 MB), on
// which it answers a protocol error and closes the connection.
func TestPoisonRedis(t *testing.T) {
	spec := redisSpec
	args := spec.args
	spec.args = func(port int, dir string) []string {
		return append(args(port, dir), "--proto-max-bulk-len", "1048576")
	}
	srv := startPrivate(t, spec)
	b := redisBroker("redis://" + srv.addr() + "/0?stream=poison:{topic}&minidle=200ms")
	runPoison(t, poisonCase{name: "redis", topic: b.Topic, pub: b.NewPublisher, listen: brokerReceiver(b),
		poison: outbox.Message{MsgID: "poison-big-payload", Payload: bigPayload(1200 << 10)}})
}

// TestPoisonKafka: a record over the producer's max_message_bytes
// (1000012 by default), on kfake.
func TestPoisonKafka(t *testing.T) {
	kc := startKafkaCluster(t)
	const topic = "transfer.done"
	u := kc.url() + "?topic=poison.{topic}&timeout=5s"
	kc.createTopic(t, "poison."+topic, 4)
	runPoison(t, poisonCase{name: "kafka", topic: topic,
		pub: func(t *testing.T) outbox.Publisher {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := outboxkafka.NewPublisher(ctx, outboxkafka.PublisherConfig{URL: u})
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			return p
		},
		listen: func(t *testing.T, a *arrivals) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := outboxkafka.NewSubscriber(ctx, outboxkafka.SubscriberConfig{URL: u, Group: "faults", Topics: []string{topic}})
			if err != nil {
				t.Fatalf("NewSubscriber: %v", err)
			}
			runSubscriber(t, "kafka", s, a)
		},
		poison: outbox.Message{MsgID: "poison-big-record", Payload: bigPayload(1200 << 10)},
	})
}

// bigPayload is a JSON object of about n bytes.
func bigPayload(n int) []byte {
	return []byte(`{"pad":"` + strings.Repeat("x", n) + `"}`)
}

// TestPoisonWebhook: the receiver drops the TCP connection (hijacks it and
// closes it) whenever the poison's payload arrives.
func TestPoisonWebhook(t *testing.T) {
	// The payload goes through a jsonb column, which respaces it: the
	// marker is a string value.
	marker := []byte(`drop-my-connection`)
	var a atomic.Pointer[arrivals]
	recv := webhookReceiver(t, func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if !bytes.Contains(body, marker) {
			return false
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijacking the poison's connection: %v", err)
			return true
		}
		abort(conn)
		return true
	}, a.Load)
	runPoison(t, poisonCase{name: "webhook", topic: "transfer.done",
		pub:    func(t *testing.T) outbox.Publisher { return newWebhook(t, recv.URL) },
		listen: func(_ *testing.T, got *arrivals) { a.Store(got) },
		poison: outbox.Message{MsgID: "poison-drops-connection", Payload: []byte(`{"do":"drop-my-connection"}`)},
	})
}

// webhookReceiver is an HTTP receiver that records every message into the
// arrivals current returns and answers 204, unless intercept, given the
// request first, handled it (returned true).
func webhookReceiver(t *testing.T, intercept func(w http.ResponseWriter, r *http.Request, body []byte) bool, current func() *arrivals) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if intercept != nil && intercept(w, r, body) {
			return
		}
		id, err := url.PathUnescape(r.Header.Get("Ce-Id"))
		if err != nil || id == "" {
			t.Errorf("webhook receiver: ce-id %q: %v", r.Header.Get("Ce-Id"), err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if a := current(); a != nil {
			a.add(id)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func newWebhook(t *testing.T, u string) outbox.Publisher {
	t.Helper()
	p, err := webhook.New(webhook.Config{URL: u, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("webhook.New: %v", err)
	}
	return p
}

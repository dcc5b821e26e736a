package outboxkafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
)

func isHeldBack(err error) bool { return errors.Is(err, outbox.ErrHeldBack) }

func TestBadConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pubCases := []struct {
		name string
		cfg  outboxkafka.PublisherConfig
		want string
	}{
		{"empty URL", outboxkafka.PublisherConfig{}, "URL is empty"},
		{"scheme", outboxkafka.PublisherConfig{URL: "nats://localhost:4222"}, `has scheme "nats"`},
		{"no host", outboxkafka.PublisherConfig{URL: "kafka://"}, "no broker address"},
		{"empty host in list", outboxkafka.PublisherConfig{URL: "kafka://a:9092,,b:9092"}, "empty broker address"},
		{"path", outboxkafka.PublisherConfig{URL: "kafka://localhost:9092/orders"}, `has path "/orders"`},
		{"unknown parameter", outboxkafka.PublisherConfig{URL: "kafka://localhost:9092?topics=x"}, `unknown URL parameter "topics"; did you mean "topic"?`},
		{"bad duration", outboxkafka.PublisherConfig{URL: "kafka://localhost:9092?timeout=soon"}, `timeout="soon"`},
		{"bad integer", outboxkafka.PublisherConfig{URL: "kafka://localhost:9092?max_message_bytes=-1"}, `max_message_bytes="-1"`},
		{"small max bytes", outboxkafka.PublisherConfig{URL: "kafka://localhost:9092", MaxMessageBytes: 100}, "MaxMessageBytes is 100"},
		{"compression", outboxkafka.PublisherConfig{URL: "kafka://localhost:9092?compression=brotli"}, `Compression is "brotli"`},
		{"tls", outboxkafka.PublisherConfig{URL: "kafka://localhost:9092?tls=yes"}, `tls="yes"`},
		{"sasl", outboxkafka.PublisherConfig{URL: "kafka://u:secret@localhost:9092?sasl=gssapi"}, `sasl="gssapi"`},
		{"sasl without user", outboxkafka.PublisherConfig{URL: "kafka://localhost:9092?sasl=plain"}, "needs a user and password"},
		{"destination", outboxkafka.PublisherConfig{URL: "kafka://localhost:9092?topic=out/{topic}"}, "not make a valid topic name"},
		{"negative timeout", outboxkafka.PublisherConfig{URL: "kafka://localhost:9092", Timeout: -time.Second}, "Timeout is -1s"},
	}
	for _, tc := range pubCases {
		_, err := outboxkafka.NewPublisher(ctx, tc.cfg)
		switch {
		case err == nil:
			t.Errorf("%s: NewPublisher succeeded, want an error containing %q", tc.name, tc.want)
		case !errors.Is(err, outboxkafka.ErrConfig):
			t.Errorf("%s: error %v does not wrap ErrConfig", tc.name, err)
		case !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: error %q, want it to contain %q", tc.name, err, tc.want)
		case strings.Contains(err.Error(), "secret"):
			t.Errorf("%s: error %q shows the password", tc.name, err)
		}
	}
	subCases := []struct {
		name string
		cfg  outboxkafka.SubscriberConfig
		want string
	}{
		{"no group", outboxkafka.SubscriberConfig{URL: "kafka://localhost:9092", Topics: []string{"a"}}, "Group is empty"},
		{"no topics", outboxkafka.SubscriberConfig{URL: "kafka://localhost:9092", Group: "g"}, "Topics is empty"},
		{"bad topic", outboxkafka.SubscriberConfig{URL: "kafka://localhost:9092", Group: "g", Topics: []string{"a b"}}, "not a valid Kafka topic name"},
		{"dlt is the topic", outboxkafka.SubscriberConfig{URL: "kafka://localhost:9092?dlt={topic}", Group: "g", Topics: []string{"a"}}, "the topic itself"},
		{"max deliveries", outboxkafka.SubscriberConfig{URL: "kafka://localhost:9092?max_deliveries=0", Group: "g", Topics: []string{"a"}}, `max_deliveries="0"`},
		{"password hidden", outboxkafka.SubscriberConfig{URL: "kafka://u:secret@localhost:9092?x=1", Group: "g", Topics: []string{"a"}}, `unknown URL parameter "x"`},
		{"short session", outboxkafka.SubscriberConfig{URL: "kafka://localhost:9092?session_timeout=500ms", Group: "g", Topics: []string{"a"}}, "SessionTimeout is 500ms"},
		{"bad session", outboxkafka.SubscriberConfig{URL: "kafka://localhost:9092?session_timeout=soon", Group: "g", Topics: []string{"a"}}, `session_timeout="soon"`},
		{"negative rebalance", outboxkafka.SubscriberConfig{URL: "kafka://localhost:9092", Group: "g", Topics: []string{"a"}, RebalanceTimeout: -time.Second}, "RebalanceTimeout is -1s"},
	}
	for _, tc := range subCases {
		_, err := outboxkafka.NewSubscriber(ctx, tc.cfg)
		switch {
		case err == nil:
			t.Errorf("%s: NewSubscriber succeeded, want an error containing %q", tc.name, tc.want)
		case !errors.Is(err, outboxkafka.ErrConfig):
			t.Errorf("%s: error %v does not wrap ErrConfig", tc.name, err)
		case !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: error %q, want it to contain %q", tc.name, err, tc.want)
		case strings.Contains(err.Error(), "secret"):
			t.Errorf("%s: error %q shows the password", tc.name, err)
		}
	}
}

func TestNewPublisherUnreachable(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	ctx := context.Background()
	url := "kafka://user:secret@127.0.0.1:" + strconv.Itoa(port)
	_, err := outboxkafka.NewPublisher(ctx, outboxkafka.PublisherConfig{URL: url, DialTimeout: 500 * time.Millisecond})
	if !outbox.IsUnavailable(err) {
		t.Fatalf("NewPublisher to a closed port: %v, want an outbox.Unavailable error", err)
	}
	if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q shows the password or spans lines", err)
	}
	t.Log(err)
}

// TestHeldBack: a message refused before sending holds back the later
// messages of its key in the batch, and only those.
func TestHeldBack(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, brokerURL, 2)
	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: brokerURL, MaxMessageBytes: 4096})
	big := json.RawMessage(`"` + strings.Repeat("x", 5000) + `"`)
	msgs := []outbox.Message{
		{MsgID: "a1", Topic: topic, Key: "a", Payload: json.RawMessage(`1`)},
		{MsgID: "a2", Topic: topic, Key: "a", Payload: big},
		{MsgID: "b1", Topic: topic, Key: "b", Payload: json.RawMessage(`2`)},
		{MsgID: "a3", Topic: topic, Key: "a", Payload: json.RawMessage(`3`)},
		{MsgID: "n1", Topic: topic, Payload: json.RawMessage(`4`)},
		{MsgID: "bad", Topic: "no/such topic", Key: "c", Payload: json.RawMessage(`5`)},
		{MsgID: "c2", Topic: topic, Key: "c", Payload: json.RawMessage(`6`)},
	}
	errs := pub.Publish(context.Background(), msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish returned %v", errs)
	}
	check := func(i int, ok func(error) bool, want string) {
		if !ok(errs[i]) {
			t.Errorf("%s: error %v, want %s", msgs[i].MsgID, errs[i], want)
		}
	}
	isNil := func(err error) bool { return err == nil }
	refused := func(err error) bool { return err != nil && !outbox.IsUnavailable(err) && !isHeldBack(err) }
	check(0, isNil, "acked")
	check(1, func(err error) bool { return refused(err) && errors.Is(err, kerr.MessageTooLarge) }, "a refusal wrapping kerr.MessageTooLarge")
	check(2, isNil, "acked")
	check(3, isHeldBack, "ErrHeldBack")
	check(4, isNil, "acked")
	check(5, refused, "a refusal (invalid topic name)")
	check(6, isHeldBack, "ErrHeldBack")
}

// TestBrokerRefusal: a record batch the broker refuses (over its
// message.max.bytes, while the producer's own limit is larger) fails as a
// refusal, not as Unavailable.
func TestBrokerRefusal(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "10000"}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	url := "kafka://" + c.ListenAddrs()[0]
	topic := newTopic(t, url, 1)
	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: url + "?compression=none", MaxMessageBytes: 100000})
	msgs := []outbox.Message{{MsgID: "big", Topic: topic, Payload: json.RawMessage(`"` + strings.Repeat("x", 20000) + `"`)}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := pub.Publish(ctx, msgs)
	if len(errs) != 1 || errs[0] == nil || outbox.IsUnavailable(errs[0]) || !errors.Is(errs[0], kerr.MessageTooLarge) {
		t.Fatalf("Publish of a record over the broker's limit: %v, want a refusal wrapping kerr.MessageTooLarge", errs)
	}
	t.Log(errs[0])

	// A topic that does not exist is a refusal of that message too.
	errs = pub.Publish(ctx, []outbox.Message{{MsgID: "x", Topic: "missing-topic", Payload: json.RawMessage(`1`)}})
	if len(errs) != 1 || errs[0] == nil || outbox.IsUnavailable(errs[0]) {
		t.Fatalf("Publish to a missing topic: %v, want a refusal", errs)
	}
	t.Log(errs[0])
}

func TestBaseline(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, brokerURL, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := outboxkafka.Baseline(ctx, brokerURL, topic, 5000, 200, 500)
	if err != nil {
		t.Fatalf("Baseline: %v", err)
	}
	t.Logf("5000 records of 200 bytes, window 500: %s (%.0f/s)", d, 5000/d.Seconds())
	// The records are the Publisher's: no key (as the bench's rows), the
	// CloudEvents attributes as ce_ headers and content-type, each with its
	// own id.
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(strings.TrimPrefix(brokerURL, "kafka://"), ",")...),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ids := map[string]bool{}
	for len(ids) < 5000 && ctx.Err() == nil {
		for _, r := range cl.PollFetches(ctx).Records() {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			if r.Key != nil || h["ce_type"] != topic || h["ce_specversion"] != "1.0" || h["ce_source"] != "/outbox" ||
				h["ce_time"] == "" || h["content-type"] != "application/json" || h["ce_id"] == "" || len(r.Value) != 200 {
				t.Fatalf("a baseline record: key %q, headers %v, %d bytes", r.Key, h, len(r.Value))
			}
			ids[h["ce_id"]] = true
		}
	}
	if len(ids) != 5000 {
		t.Errorf("%d distinct ids in the topic, want 5000", len(ids))
	}
	if _, err := outboxkafka.Baseline(ctx, brokerURL, topic, 0, 200, 500); !errors.Is(err, outboxkafka.ErrConfig) {
		t.Errorf("Baseline with n = 0: %v, want ErrConfig", err)
	}
}

// BenchmarkPublish measures Publish in batches of 500 against Baseline's
// rate on the same cluster.
func BenchmarkPublish(b *testing.B) {
	topic := newTopic(b, brokerURL, 4)
	pub := newPublisher(b, outboxkafka.PublisherConfig{URL: brokerURL})
	msgs := make([]outbox.Message, 500)
	payload := json.RawMessage(`{"p":"` + strings.Repeat("x", 192) + `"}`)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: "m" + strconv.Itoa(i), Topic: topic, Key: strconv.Itoa(i % 64), Payload: payload, CreatedAt: time.Now()}
	}
	b.ResetTimer()
	for b.Loop() {
		if errs := pub.Publish(context.Background(), msgs); errs != nil {
			b.Fatal(errs)
		}
	}
	b.ReportMetric(float64(b.N*len(msgs))/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkBaseline(b *testing.B) {
	topic := newTopic(b, brokerURL, 4)
	for b.Loop() {
		if _, err := outboxkafka.Baseline(context.Background(), brokerURL, topic, 50000, 200, 500); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*50000)/b.Elapsed().Seconds(), "msgs/s")
}

// TestSessionTimeoutOutOfRange: a SessionTimeout the brokers do not allow
// (kfake, as Kafka, allows 6s to 5m by default) makes Run return an error
// that says so, instead of retrying for ever without consuming.
func TestSessionTimeoutOutOfRange(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, brokerURL, 1)
	sub := newSubscriber(t, outboxkafka.SubscriberConfig{URL: brokerURL + "?session_timeout=2s", Group: "g-short-session", Topics: []string{topic}, Logger: testLogger(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := sub.Run(ctx, func(context.Context, outbox.Message) error { return nil })
	if err == nil || ctx.Err() != nil || !errors.Is(err, kerr.InvalidSessionTimeout) {
		t.Fatalf("Run: %v, want an error wrapping INVALID_SESSION_TIMEOUT before the deadline", err)
	}
}

package outboxkafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
)

// smallMessages returns n messages of about 200 bytes for topic, keyed in
// turn by keys (none when keys is empty).
func smallMessages(prefix, topic string, n int, keys ...string) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{
			MsgID:   fmt.Sprintf("%s-%02d", prefix, i),
			Topic:   topic,
			Payload: json.RawMessage(`"` + strings.Repeat("x", 200) + `"`),
		}
		if len(keys) > 0 {
			msgs[i].Key = keys[i%len(keys)]
		}
	}
	return msgs
}

// readTopic returns the ce_id header of every record of topic, by
// partition, in offset order; it waits until want records have been read.
func readTopic(t *testing.T, url, topic string, want int) map[int32][]string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(strings.TrimPrefix(url, "kafka://"), ",")...),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := map[int32][]string{}
	for n := 0; n < want; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s: %v", n, want, topic, got)
		}
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "ce_id" {
					got[r.Partition] = append(got[r.Partition], string(h.Value))
				}
			}
			n++
		})
	}
	return got
}

// limitedTopic creates a topic of one partition whose max.message.bytes is
// limit, far below the producer's default MaxMessageBytes.
func limitedTopic(t *testing.T, limit int) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", t.Name(), topicSeq.Add(1))
	v := fmt.Sprint(limit)
	createTopicWith(t, brokerURL, name, 1, map[string]*string{"max.message.bytes": &v})
	return name
}

// TestBatchOverTopicLimit: a topic whose max.message.bytes is below the
// producer's MaxMessageBytes refuses a record batch of many small records,
// although each of them would fit on its own. Kafka refuses the batch as a
// whole and franz-go fails every record of the partition with it. Before,
// every message spent a retry on each such batch and, batch after batch,
// good messages went DEAD; now Publish sends the refused partition's records
// again one at a time, and all of them are acked, each written once. The
// messages have no key, so their order is not part of the contract: records
// produced after the refusal came back go out in a batch of their own, ahead
// of the ones sent again.
func TestBatchOverTopicLimit(t *testing.T) {
	t.Parallel()
	topic := limitedTopic(t, 2000)
	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: brokerURL + "?compression=none", Logger: testLogger(t)})
	msgs := smallMessages("small", topic, 40)
	errs := pub.Publish(context.Background(), msgs)
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", msgs[i].MsgID, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	got := readTopic(t, brokerURL, topic, len(msgs))[0]
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	for _, m := range msgs {
		if seen[m.MsgID] != 1 {
			t.Fatalf("the topic holds %v, want each message once", got)
		}
	}
}

// TestOneRecordOverTopicLimit: among records of one partition, the one the
// topic is too small for is refused alone: the others are acked, and the
// later ones of its key are held back (not produced, no retry spent), so
// that none overtakes it.
func TestOneRecordOverTopicLimit(t *testing.T) {
	t.Parallel()
	topic := limitedTopic(t, 2000)
	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: brokerURL + "?compression=none", Logger: testLogger(t)})
	msgs := smallMessages("m", topic, 30, "a", "b", "c")
	const big = 13 // key "b"
	msgs[big].Payload = json.RawMessage(`"` + strings.Repeat("y", 2500) + `"`)
	errs := pub.Publish(context.Background(), msgs)
	if errs == nil {
		t.Fatal("Publish acked a record larger than the topic's max.message.bytes")
	}
	var acked []string
	for i, err := range errs {
		m := msgs[i]
		switch {
		case i == big:
			if err == nil || outbox.IsUnavailable(err) || errors.Is(err, outbox.ErrHeldBack) || !errors.Is(err, kerr.MessageTooLarge) {
				t.Errorf("%s (too large for the topic): %v, want a refusal wrapping MESSAGE_TOO_LARGE", m.MsgID, err)
			}
		case m.Key == msgs[big].Key && i > big:
			if !errors.Is(err, outbox.ErrHeldBack) || outbox.IsUnavailable(err) {
				t.Errorf("%s (key %s, after the refused one): %v, want ErrHeldBack", m.MsgID, m.Key, err)
			}
		case err != nil:
			t.Errorf("%s (key %s): %v, want an ack", m.MsgID, m.Key, err)
		default:
			acked = append(acked, m.MsgID)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	got := readTopic(t, brokerURL, topic, len(acked))[0]
	keyOrder(t, "m", msgs, got)
	if len(got) != len(acked) {
		t.Fatalf("the topic holds %d records, want the %d acked: %v", len(got), len(acked), got)
	}
}

// TestIsolationDeadline: when the deadline ends while the records of a
// refused batch are sent one at a time, the records not sent again spend no
// retry (ErrHeldBack) and none is refused for a batch it was only part of.
func TestIsolationDeadline(t *testing.T) {
	t.Parallel()
	topic := limitedTopic(t, 2000)
	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: brokerURL + "?compression=none", Logger: testLogger(t)})
	msgs := smallMessages("d", topic, 500)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	errs := pub.Publish(ctx, msgs)
	var acked, held, unavailable int
	for i, err := range errs {
		switch {
		case err == nil:
			acked++
		case errors.Is(err, outbox.ErrHeldBack):
			held++
		case outbox.IsUnavailable(err):
			unavailable++
		default:
			t.Errorf("%s: %v, a refusal; each record fits the topic on its own", msgs[i].MsgID, err)
		}
	}
	t.Logf("acked %d, held back %d, unavailable %d", acked, held, unavailable)
}

// TestKeyOrderAcrossRefusedBatches: many keys with several messages each, to
// a topic too small for a batch of them. Kafka refuses batch after batch,
// and records produced after a refusal came back would go out in a batch of
// their own, ahead of the refused ones sent again. A key's next message is
// produced only after its previous one is acked, so every key's messages are
// in the topic in the batch's order, each once.
func TestKeyOrderAcrossRefusedBatches(t *testing.T) {
	t.Parallel()
	topic := limitedTopic(t, 2000)
	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: brokerURL + "?compression=none", Logger: testLogger(t)})
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	msgs := smallMessages("o", topic, 4000, keys...)
	for i, err := range pub.Publish(context.Background(), msgs) {
		if err != nil {
			t.Errorf("%s: %v", msgs[i].MsgID, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	keyOrder(t, "o", msgs, readTopic(t, brokerURL, topic, len(msgs))[0])
}

// keyOrder fails t unless each record of got (the ce_id of a record of
// msgs, "<prefix>-<index>") is there once and each key's records are in
// the batch's order.
func keyOrder(t *testing.T, prefix string, msgs []outbox.Message, got []string) {
	t.Helper()
	last := map[string]int{}
	seen := map[string]bool{}
	for _, id := range got {
		var i int
		if _, err := fmt.Sscanf(id, prefix+"-%d", &i); err != nil || i >= len(msgs) {
			t.Fatalf("unexpected record %q", id)
		}
		if seen[id] {
			t.Fatalf("%s is in the topic twice", id)
		}
		seen[id] = true
		k := msgs[i].Key
		if j, ok := last[k]; ok && j > i {
			t.Fatalf("key %s: %s after %s", k, id, msgs[j].MsgID)
		}
		last[k] = i
	}
}

package outboxkafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
)

// answerProduce makes every produce request to c fail with code on every
// partition, the way a broker refuses a record batch.
func answerProduce(c *kfake.Cluster, code int16) {
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.ProduceRequest)
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			st.TopicID = rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// TestBrokerRefusalNotRetried: CORRUPT_MESSAGE (a null key on a compacted
// topic, a bad CRC) is flagged retriable by Kafka, but franz-go does not retry
// it and hands it to the record at once. It is a refusal of the message,
// which spends one of its retries, not outbox.Unavailable, which would pause
// the relay and publish the same message again for ever.
func TestBrokerRefusalNotRetried(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	url := "kafka://" + c.ListenAddrs()[0]
	topic := newTopic(t, url, 1)
	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: url, Logger: testLogger(t)})
	answerProduce(c, kerr.CorruptMessage.Code)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := pub.Publish(ctx, []outbox.Message{{MsgID: "corrupt", Topic: topic, Payload: json.RawMessage(`1`)}})
	if len(errs) != 1 || errs[0] == nil {
		t.Fatalf("Publish = %v, want the broker's refusal", errs)
	}
	if outbox.IsUnavailable(errs[0]) {
		t.Errorf("CORRUPT_MESSAGE is outbox.Unavailable (the relay would pause and retry it for ever): %v", errs[0])
	}
	if !errors.Is(errs[0], kerr.CorruptMessage) {
		t.Errorf("error %v does not wrap kerr.CorruptMessage", errs[0])
	}
}

package outboxkafka

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
)

// The Kafka protocol binding of CloudEvents, binary mode: each attribute is a
// header "ce_<name>" whose value is the attribute's text in UTF-8, and the
// datacontenttype travels as the "content-type" header.
const (
	headerPrefix      = "ce_"
	headerContentType = "content-type"
)

// Headers that the subscriber adds to a record it moves to the dead-letter
// topic. A record that comes back from a dead-letter topic (replayed by a
// person) loses the old ones before new ones are added.
const (
	HeaderDeadLetterGroup      = "outbox-dlt-group"      // the consumer group that gave up
	HeaderDeadLetterError      = "outbox-dlt-error"      // the last handler (or decode) error
	HeaderDeadLetterDeliveries = "outbox-dlt-deliveries" // handler calls made, 0 for a record that is not an event
	HeaderDeadLetterTopic      = "outbox-dlt-topic"      // where the record was consumed from
	HeaderDeadLetterPartition  = "outbox-dlt-partition"
	HeaderDeadLetterOffset     = "outbox-dlt-offset"
	HeaderDeadLetterTime       = "outbox-dlt-time" // when it was dead-lettered, RFC 3339
	deadLetterHeaderPrefix     = "outbox-dlt-"
)

// newRecord builds the record of m for topic: key = msg_key, value = the
// payload, one ce_ header per attribute plus content-type.
func newRecord(m *outbox.Message, topic, source string) *kgo.Record {
	attrs := cloudevents.Attributes(m, source)
	headers := make([]kgo.RecordHeader, 0, len(attrs)+1)
	for _, a := range attrs {
		headers = append(headers, kgo.RecordHeader{Key: headerPrefix + a.Name, Value: []byte(a.Value)})
	}
	headers = append(headers, kgo.RecordHeader{Key: headerContentType, Value: []byte(cloudevents.JSON)})
	r := &kgo.Record{Topic: topic, Value: m.Payload, Headers: headers}
	if m.Key != "" {
		r.Key = []byte(m.Key)
	}
	return r
}

// decodeRecord turns a consumed record back into the message.
func decodeRecord(r *kgo.Record) (outbox.Message, error) {
	attrs := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		switch {
		case strings.HasPrefix(h.Key, headerPrefix):
			attrs[strings.ToLower(h.Key[len(headerPrefix):])] = string(h.Value)
		case strings.EqualFold(h.Key, headerContentType):
			attrs[cloudevents.ContentType] = string(h.Value)
		}
	}
	return cloudevents.Decode(attrs, r.Value)
}

// recordBytes is the size the record takes in a record batch of its own, as
// the producer counts it against MaxMessageBytes (franz-go's
// recBatch.recordNumbersAt), plus the batch's overhead with some slack for
// the request version. It lets Publish refuse a record that cannot be sent
// before anything of its key is produced.
func recordBytes(r *kgo.Record) int {
	l := 1 + // attributes
		1 + // timestamp delta 0
		1 + // offset delta 0
		varintLen(len(r.Key)) + len(r.Key) +
		varintLen(len(r.Value)) + len(r.Value) +
		varintLen(len(r.Headers))
	for _, h := range r.Headers {
		l += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
	}
	const batchOverhead = 61 + 16 // franz-go's recordBatchOverhead, and room for flexible versions
	return batchOverhead + varintLen(l) + l
}

// varintLen is the length of n as a zig-zag varint (n >= 0).
func varintLen(n int) int {
	v := n << 1
	l := 1
	for v >= 0x80 {
		v >>= 7
		l++
	}
	return l
}

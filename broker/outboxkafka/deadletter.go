package outboxkafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-go/outbox"
)

// DeadLetter is one record of a dead-letter topic.
type DeadLetter struct {
	// Message is the message as far as it could be decoded: all of it for an
	// outbox event, and for a record that is not one (DecodeErr set), only
	// the payload and the key.
	Message outbox.Message
	// DecodeErr says why the record is not an outbox event, or is nil.
	DecodeErr error
	// Group is the consumer group that gave up on the message; empty for a
	// record moved without dead-letter headers because they did not fit.
	Group string
	// Err is the last handler (or decode) error, as text.
	Err string
	// Deliveries is how many times the handler was called (0 when the record
	// was not an event).
	Deliveries int
	// Topic, Partition and Offset say where the group consumed it from.
	Topic     string
	Partition int32
	Offset    int64
	// Time is when it was moved to the dead-letter topic.
	Time time.Time
}

// DeadLetters reads the dead-letter topics of cfg (those NewSubscriber with
// cfg would write to) from their start to their current end, and returns the
// records that cfg.Group put there, each partition in offset order. A record
// without an outbox-dlt-group header is returned too, with Group empty: the
// subscriber writes one when even the copy with the fewest dead-letter
// headers was too large, and moves the record as it was consumed (its Err,
// Topic, Partition, Offset and Time are then unknown; the log has them).
// DeadLetters does not join the group and commits nothing.
func DeadLetters(ctx context.Context, cfg SubscriberConfig) ([]DeadLetter, error) {
	c, s, err := newSubscriberConfig(cfg)
	if err != nil {
		return nil, err
	}
	var names []string
	seen := map[string]bool{}
	for _, t := range s.topics {
		if d := s.dlt[t]; !seen[d] {
			seen[d] = true
			names = append(names, d)
		}
	}
	cl, err := c.newClient(ctx, &connState{})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, names...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, s.brokerError(fmt.Errorf("outboxkafka: listing the start offsets of %v: %w", names, err))
	}
	ends, err := adm.ListEndOffsets(ctx, names...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, s.brokerError(fmt.Errorf("outboxkafka: listing the end offsets of %v: %w", names, err))
	}
	assign := map[string]map[int32]kgo.Offset{}
	remaining := 0
	ends.Each(func(o kadm.ListedOffset) {
		start, _ := starts.Lookup(o.Topic, o.Partition)
		if o.Offset > start.Offset {
			if assign[o.Topic] == nil {
				assign[o.Topic] = map[int32]kgo.Offset{}
			}
			assign[o.Topic][o.Partition] = kgo.NewOffset().At(start.Offset)
			remaining++
		}
	})
	if remaining == 0 {
		return nil, nil
	}
	cl.AddConsumePartitions(assign)
	var out []DeadLetter
	for remaining > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, outbox.Unavailable(fmt.Errorf("outboxkafka: reading the dead-letter topics %v: %w", names, err))
		}
		fetches.EachError(func(topic string, p int32, ferr error) {
			if err == nil {
				err = fmt.Errorf("outboxkafka: reading dead-letter topic %q partition %d: %w", topic, p, ferr)
			}
		})
		if err != nil {
			return nil, s.brokerError(err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			end, _ := ends.Lookup(r.Topic, r.Partition)
			if r.Offset >= end.Offset {
				return
			}
			if r.Offset == end.Offset-1 {
				remaining--
			}
			if dl := parseDeadLetter(r); dl.Group == s.group || dl.Group == "" {
				out = append(out, dl)
			}
		})
	}
	return out, nil
}

func parseDeadLetter(r *kgo.Record) DeadLetter {
	var dl DeadLetter
	dl.Message, dl.DecodeErr = decodeRecord(r)
	if dl.DecodeErr != nil {
		dl.Message.Payload = r.Value
		dl.Message.Key = string(r.Key)
	}
	for _, h := range r.Headers {
		v := string(h.Value)
		switch h.Key {
		case HeaderDeadLetterGroup:
			dl.Group = v
		case HeaderDeadLetterError:
			dl.Err = v
		case HeaderDeadLetterDeliveries:
			dl.Deliveries, _ = strconv.Atoi(v)
		case HeaderDeadLetterTopic:
			dl.Topic = v
		case HeaderDeadLetterPartition:
			p, _ := strconv.ParseInt(v, 10, 32)
			dl.Partition = int32(p)
		case HeaderDeadLetterOffset:
			dl.Offset, _ = strconv.ParseInt(v, 10, 64)
		case HeaderDeadLetterTime:
			dl.Time, _ = time.Parse(time.RFC3339Nano, v)
		}
	}
	return dl
}

// deadLetterCopy is one way of carrying a record to its dead-letter topic.
type deadLetterCopy struct {
	rec  *kgo.Record
	note string // what was left out, for the log; empty for the full copy
}

// deadLetterCopies returns the records that can carry r to topic, from the
// most informative to the smallest: r with every dead-letter header; then,
// for a copy that does not fit maxBytes, the error text cut short; then only
// the headers that say where r came from and which group gave up; last, r as
// it came, which fit its own topic (a dead-letter topic has the same limit
// unless someone set one). Every copy but the last fits maxBytes as
// recordBytes counts; a broker whose topic limit is lower refuses a copy
// with MESSAGE_TOO_LARGE, and the caller tries the next.
func deadLetterCopies(r *kgo.Record, topic, group string, cause error, deliveries, maxBytes int) []deadLetterCopy {
	kept := make([]kgo.RecordHeader, 0, len(r.Headers)+7)
	for _, h := range r.Headers {
		if !strings.HasPrefix(h.Key, deadLetterHeaderPrefix) {
			kept = append(kept, h)
		}
	}
	now := time.Now().UTC().Format(time.RFC3339Nano) // once: its length varies
	build := func(extra ...kgo.RecordHeader) *kgo.Record {
		headers := append(kept[:len(kept):len(kept)], extra...)
		return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: headers}
	}
	full := func(errText string) *kgo.Record {
		return build(
			kgo.RecordHeader{Key: HeaderDeadLetterGroup, Value: []byte(group)},
			kgo.RecordHeader{Key: HeaderDeadLetterError, Value: []byte(errText)},
			kgo.RecordHeader{Key: HeaderDeadLetterDeliveries, Value: []byte(strconv.Itoa(deliveries))},
			kgo.RecordHeader{Key: HeaderDeadLetterTopic, Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: HeaderDeadLetterPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
			kgo.RecordHeader{Key: HeaderDeadLetterOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
			kgo.RecordHeader{Key: HeaderDeadLetterTime, Value: []byte(now)},
		)
	}
	var copies []deadLetterCopy
	errText := cause.Error()
	rec := full(errText)
	if over := recordBytes(rec) - maxBytes; over <= 0 {
		copies = append(copies, deadLetterCopy{rec: rec})
	} else if keep := len(errText) - over - len(cutMark); keep > 0 {
		// A shorter value never makes the record longer (its length's
		// varint only shrinks), so the cut copy fits.
		copies = append(copies, deadLetterCopy{
			rec:  full(cutUTF8(errText, keep) + cutMark),
			note: fmt.Sprintf("%s cut to %d of %d bytes to fit MaxMessageBytes", HeaderDeadLetterError, keep, len(errText)),
		})
	}
	essential := build(
		kgo.RecordHeader{Key: HeaderDeadLetterGroup, Value: []byte(group)},
		kgo.RecordHeader{Key: HeaderDeadLetterTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderDeadLetterPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
		kgo.RecordHeader{Key: HeaderDeadLetterOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
	)
	if recordBytes(essential) <= maxBytes {
		copies = append(copies, deadLetterCopy{rec: essential,
			note: "without " + HeaderDeadLetterError + ", " + HeaderDeadLetterDeliveries + " and " + HeaderDeadLetterTime + ", which did not fit"})
	}
	return append(copies, deadLetterCopy{
		rec:  &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: r.Headers},
		note: "as consumed, without dead-letter headers, which did not fit",
	})
}

// cutMark ends an error text cut short to fit.
const cutMark = "…"

// cutUTF8 returns the longest prefix of s of at most n bytes that does not
// end inside a UTF-8 sequence.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// deadLetterLogEvery is how often a dead-letter produce that keeps failing
// is logged again; the first failure is logged at once.
const deadLetterLogEvery = time.Minute

// deadLetter produces r to its dead-letter topic and waits for the ack,
// trying again while ctx lasts. It reports whether r is done.
//
// A copy the producer or the topic refuses as too large is replaced by the
// next smaller one of deadLetterCopies. When even r as it came is refused,
// or the topic refuses the record for another reason, r is not acked (that
// would lose it): its partition waits, the refusal is logged at Error once a
// minute with what to change, and the produce is tried again until it
// succeeds or ctx ends.
func (s *Subscriber) deadLetter(ctx context.Context, r *kgo.Record, cause error, deliveries int) bool {
	topic := s.dlt[r.Topic]
	copies := deadLetterCopies(r, topic, s.group, cause, deliveries, s.conn.maxBytes)
	backoff := s.backoff
	var (
		failures int
		first    time.Time
		logged   time.Time
	)
	for i := 0; ; {
		dl := copies[i]
		// Each attempt produces a record of its own: franz-go keeps the
		// context of the first produce in the record, and a retry of the
		// same record would fail at once with that context canceled.
		rec := *dl.rec
		// The produce in hand may finish after ctx ends, like a handler call.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.conn.timeout)
		err := s.cl.ProduceSync(pctx, &rec).FirstErr()
		cancel()
		if err == nil {
			attrs := []any{"group", s.group, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
				"dead_letter_topic", topic, "deliveries", deliveries, "err", cause}
			if dl.note != "" {
				attrs = append(attrs, "copy", dl.note)
			}
			s.log.Warn("outboxkafka: message moved to the dead-letter topic", attrs...)
			return true
		}
		if errors.Is(err, kerr.MessageTooLarge) && i < len(copies)-1 {
			s.log.Debug("outboxkafka: the dead-letter copy is too large; trying a smaller one", "group", s.group,
				"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "dead_letter_topic", topic, "err", err)
			i++
			continue
		}
		failures++
		if failures == 1 {
			first = time.Now()
		}
		if time.Since(logged) >= deadLetterLogEvery {
			logged = time.Now()
			s.logDeadLetterFailure(r, dl.rec, err, failures, first)
		}
		if !sleep(ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, 20*s.backoff)
		// The topic's settings may have changed meanwhile: start again
		// from the most informative copy that fits MaxMessageBytes.
		i = 0
	}
}

// logDeadLetterFailure says why r cannot be moved to the dead-letter topic
// yet, and what to change when retrying will not help.
func (s *Subscriber) logDeadLetterFailure(r, dl *kgo.Record, err error, failures int, since time.Time) {
	attrs := []any{"group", s.group, "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
		"dead_letter_topic", dl.Topic, "attempts", failures, "waiting_since", since.Format(time.RFC3339), "err", err}
	classified := classify(err, dl.Topic, nil)
	switch {
	case errors.Is(err, kerr.MessageTooLarge):
		n := recordBytes(dl)
		s.log.Error(fmt.Sprintf("outboxkafka: the dead-letter topic refuses the record as too large even without the dead-letter headers (%d bytes); "+
			"raise the dead-letter topic's max.message.bytes (and the subscriber's MaxMessageBytes, now %d, URL parameter max_message_bytes) to at least %d. "+
			"The record is not committed: its partition waits and the produce is tried again", n, s.conn.maxBytes, n),
			attrs...)
	case outbox.IsUnavailable(classified):
		s.log.Error("outboxkafka: producing to the dead-letter topic failed; its partition waits and the produce is tried again", attrs...)
	default:
		s.log.Error("outboxkafka: the broker refuses the record on the dead-letter topic (check that the topic exists, that this client may write to it, and that its settings accept the record); "+
			"the record is not committed: its partition waits and the produce is tried again", attrs...)
	}
}

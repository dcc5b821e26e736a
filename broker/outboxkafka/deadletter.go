package outboxkafka

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
	// Group is the consumer group that gave up on the message.
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
// records that cfg.Group put there, each partition in offset order. It
// does not join the group and commits nothing.
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
			if dl := parseDeadLetter(r); dl.Group == s.group {
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

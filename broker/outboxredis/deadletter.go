package outboxredis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox"
)

// deadLetterScript adds the dead letter and acknowledges the entry
// atomically, and only if the XADD succeeded: a MULTI/EXEC would run the
// XACK even after the XADD failed (WRONGTYPE), losing the message.
// KEYS: stream, dead stream. ARGV: group, entry id, field-value pairs.
var deadLetterScript = redis.NewScript(`
redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
`)

// deadLetter moves e to the dead-letter stream with the reason and the
// delivery count added, and acknowledges it, in one script.
func (r *runner) deadLetter(e *redis.XMessage, deliveries int64, reason string) error {
	names := make([]string, 0, len(e.Values))
	for name := range e.Values {
		if !strings.HasPrefix(name, "dead-") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	args := make([]any, 0, 2+2*len(names)+10)
	args = append(args, r.s.cfg.Group, e.ID)
	for _, name := range names {
		args = append(args, name, e.Values[name])
	}
	args = append(args,
		FieldDeadReason, reason,
		FieldDeadStream, r.s.stream,
		FieldDeadID, e.ID,
		FieldDeadGroup, r.s.cfg.Group,
		FieldDeadDeliveries, strconv.FormatInt(deliveries, 10),
	)
	ctx, cancel := r.opContext()
	defer cancel()
	err := deadLetterScript.Run(ctx, r.s.rdb, []string{r.s.stream, r.s.dead}, args...).Err()
	if err != nil && !unavailable(err) {
		return fmt.Errorf("cannot move entry %s to dead-letter stream %s: %w", e.ID, r.s.dead, err)
	}
	return err
}

// DeadLetter is one entry of a dead-letter stream.
type DeadLetter struct {
	// ID is the dead letter's entry id in the dead-letter stream.
	ID string
	// Message is the message, as the handler would have received it; zero
	// when the entry was not an event.
	Message outbox.Message
	// DecodeErr says why Message is zero, if it is.
	DecodeErr error
	// Reason is why it was dead-lettered (FieldDeadReason).
	Reason string
	// Stream and EntryID are where it was read from.
	Stream, EntryID string
	// Deliveries is how many times the group delivered it.
	Deliveries int
	// Fields are all the entry's fields, as stored.
	Fields map[string]string
}

// DeadLetters returns up to count entries of the group's dead-letter stream,
// oldest first (XRANGE). count <= 0 means all of them.
func (s *Subscriber) DeadLetters(ctx context.Context, count int64) ([]DeadLetter, error) {
	return readDeadLetters(ctx, s.rdb, s.dead, count)
}

func readDeadLetters(ctx context.Context, rdb redis.Cmdable, key string, count int64) ([]DeadLetter, error) {
	var entries []redis.XMessage
	var err error
	if count > 0 {
		entries, err = rdb.XRangeN(ctx, key, "-", "+", count).Result()
	} else {
		entries, err = rdb.XRange(ctx, key, "-", "+").Result()
	}
	if err != nil {
		return nil, fmt.Errorf("outboxredis: reading dead-letter stream %s: %w", key, err)
	}
	out := make([]DeadLetter, 0, len(entries))
	for _, e := range entries {
		d := DeadLetter{ID: e.ID, Fields: make(map[string]string, len(e.Values))}
		for k, v := range e.Values {
			d.Fields[k], _ = v.(string)
		}
		d.Message, d.DecodeErr = decodeEntry(e.Values)
		d.Reason = d.Fields[FieldDeadReason]
		d.Stream = d.Fields[FieldDeadStream]
		d.EntryID = d.Fields[FieldDeadID]
		d.Deliveries, _ = strconv.Atoi(d.Fields[FieldDeadDeliveries])
		out = append(out, d)
	}
	return out, nil
}

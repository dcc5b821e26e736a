package outboxkafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-go/outbox"
)

// ErrUnknownTopic marks a message refused because its destination topic does
// not exist on the cluster. The error that carries it also wraps
// kerr.UnknownTopicOrPartition (or kerr.UnknownTopicID).
var ErrUnknownTopic = errors.New("outboxkafka: topic does not exist")

// topicCache remembers the destination topics the cluster said exist, so that
// Publish asks about a topic once, not once per batch. A topic the cluster
// said is missing is not remembered: the next batch asks again, and picks up
// a topic created in the meantime.
type topicCache struct {
	mu    sync.Mutex
	known map[string]struct{}
}

// unknown returns the valid topic names of topics, once each, not known to
// exist. A batch whose topics are all known, the usual case, costs a map
// lookup per message and allocates nothing; only the topics not known are
// checked for validity (Publish refuses an invalid one on its own).
func (c *topicCache) unknown(topics []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, t := range topics {
		if _, ok := c.known[t]; !ok && !slices.Contains(out, t) && validTopic(t) == "" {
			out = append(out, t)
		}
	}
	return out
}

func (c *topicCache) add(topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known == nil {
		c.known = map[string]struct{}{}
	}
	c.known[topic] = struct{}{}
}

// forget drops topic, so that the next batch for it asks the cluster again.
// Publish calls it when a record to the topic fails for a missing topic or
// without an answer: the topic may have been deleted since it was checked,
// and franz-go's own wait for a missing topic can outlast any Publish
// deadline, which would make such a message Unavailable for ever.
func (c *topicCache) forget(topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.known, topic)
}

// checkTopics asks the cluster, in one metadata request, about topics, and
// returns the refusal for each one that messages must not be produced to.
//
// The request allows auto-creation exactly when the producer's own metadata
// requests do (auto_create): then a broker with auto.create.topics.enable
// creates the topic here as it would on a produce, and a broker without it
// answers UNKNOWN_TOPIC_OR_PARTITION, as a produce would end. Deciding here,
// rather than from a produce, makes a missing topic a prompt refusal:
// franz-go waits for a missing topic through several metadata refreshes
// (UnknownTopicRetries), which can take longer than the Publish deadline, so
// the message would come back Unavailable every time, never spend its
// retries, and hold up every batch it is in.
//
// A request that fails (no broker answered before ctx ended, a connection
// error, the client closed) says nothing about the topics: it is returned as
// an outbox.Unavailable error, for the messages of the batch. A topic that exists is cached; one with a
// code franz-go retries (LEADER_NOT_AVAILABLE while an auto-created topic
// gets its leaders) is left to the produce, unchecked.
func (p *Publisher) checkTopics(ctx context.Context, topics []string) (map[string]error, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = p.conn.autoCreate
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, p.cl)
	if err != nil {
		return nil, outbox.Unavailable(fmt.Errorf("outboxkafka: not sent: cannot check that topics %q exist%s: %w", topics, p.state.suffix(), err))
	}
	errs := map[string]error{}
	for _, rt := range resp.Topics {
		if rt.Topic == nil {
			continue
		}
		t := *rt.Topic
		switch err := kerr.ErrorForCode(rt.ErrorCode); {
		case err == nil:
			p.topics.add(t)
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			errs[t] = unknownTopicError(t, p.conn.autoCreate, err)
		case !kerr.IsRetriable(err):
			// TOPIC_AUTHORIZATION_FAILED, INVALID_TOPIC_EXCEPTION: a produce
			// would fail the same way.
			errs[t] = fmt.Errorf("outboxkafka: the cluster refused topic %q: %w", t, err)
		}
	}
	return errs, nil
}

// unknownTopicError is the refusal of a message whose topic does not exist.
func unknownTopicError(topic string, autoCreate bool, err error) error {
	hint := "create it, fix the row's topic or the Destination template, or set auto_create=true if the brokers allow auto.create.topics.enable"
	if autoCreate {
		hint = "the brokers did not create it (auto.create.topics.enable is false); create it, or fix the row's topic or the Destination template"
	}
	return fmt.Errorf("%w: %q; %s: %w", ErrUnknownTopic, topic, hint, err)
}

package outboxredis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cloudevents"
)

// Publisher adds outbox messages to Redis streams with XADD, pipelined. It
// implements outbox.Publisher and is safe for concurrent use.
type Publisher struct {
	rdb          redis.UniversalClient
	owned        bool // rdb is the publisher's own, which Close closes
	addr         string
	source       string
	stream       string
	maxLen       int64
	pipelineSize int
	maxBulk      int // the server's proto-max-bulk-len
	headers      *cloudevents.HeaderLog
}

// defaultMaxBulk is Redis's default proto-max-bulk-len, the most bytes of
// one argument of a command. The server answers a longer one with a
// protocol error and closes the connection.
const defaultMaxBulk = 512 << 20

var _ outbox.Publisher = (*Publisher)(nil)

// NewPublisher applies cfg's defaults, checks it, connects to Redis and
// checks the connection with a PING. A configuration error satisfies
// errors.Is(err, ErrConfig); a server that cannot be reached gives an
// error that satisfies outbox.IsUnavailable. Errors never show the password.
func NewPublisher(ctx context.Context, cfg PublisherConfig) (*Publisher, error) {
	cfg, conn, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	rdb, owned := conn.client()
	if err := ping(ctx, rdb, conn.addr); err != nil {
		if owned {
			_ = rdb.Close()
		}
		return nil, err
	}
	return &Publisher{
		rdb:          rdb,
		owned:        owned,
		addr:         conn.addr,
		source:       cfg.Source,
		stream:       cfg.Stream,
		maxLen:       cfg.MaxLen,
		pipelineSize: cfg.PipelineSize,
		maxBulk:      maxBulk(ctx, rdb),
		headers:      cloudevents.NewHeaderLog(cfg.Logger, "outboxredis"),
	}, nil
}

// maxBulk returns the server's proto-max-bulk-len, or Redis's default when
// the server does not say (CONFIG is often forbidden on managed servers).
func maxBulk(ctx context.Context, rdb redis.UniversalClient) int {
	v, err := rdb.ConfigGet(ctx, "proto-max-bulk-len").Result()
	if err != nil {
		return defaultMaxBulk
	}
	n, err := strconv.Atoi(v["proto-max-bulk-len"])
	if err != nil || n <= 0 {
		return defaultMaxBulk
	}
	return n
}

// check returns an error satisfying outbox.IsUndeliverable when a value of
// m's entry is longer than the server's proto-max-bulk-len. Redis strings
// are binary-safe: nothing else of a row is refused.
func (p *Publisher) check(m *outbox.Message, stream string) error {
	field, n := "stream key", len(stream)
	if len(m.Payload) > n {
		field, n = "payload", len(m.Payload)
	}
	for name, v := range m.Headers {
		if len(v) > n {
			field, n = fmt.Sprintf("header %q", name), len(v)
		}
	}
	if n > p.maxBulk {
		return cloudevents.Undeliverable("Redis", m, field,
			fmt.Sprintf("is %d bytes, over the %d bytes of one argument the server takes (proto-max-bulk-len)", n, p.maxBulk))
	}
	return nil
}

// ping checks that the server answers, for the constructors. A server that
// cannot be reached (or is loading, or read-only) is Unavailable; one that
// refuses the credentials is a plain error, since only a change of
// configuration helps.
func ping(ctx context.Context, rdb redis.UniversalClient, addr string) error {
	err := rdb.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	if _, isReply := replyError(err); !isReply {
		return outbox.Unavailable(fmt.Errorf("outboxredis: cannot reach Redis at %s: %w", addr, err))
	}
	err = fmt.Errorf("outboxredis: Redis at %s refused the connection: %w%s", addr, err, hint(err))
	if unavailable(err) && !redis.IsAuthError(err) {
		return outbox.Unavailable(err)
	}
	return err
}

// Close closes the publisher's connections. A Publish after Close fails
// every message with an error that satisfies outbox.IsUnavailable.
func (p *Publisher) Close() error {
	if !p.owned {
		return nil
	}
	return p.rdb.Close()
}

// Stream returns the stream key that a message of topic is added to.
func (p *Publisher) Stream(topic string) string {
	return streamKey(p.stream, topic)
}

// Publish adds each message to its topic's stream (XADD with an
// auto-generated id), sending the batch in pipelines of at most PipelineSize
// commands, and returns one error per message, in order, or nil when Redis
// acknowledged them all. The XADD reply (the new entry's id) is the ack.
//
// An error that satisfies outbox.IsUnavailable means Redis could not take the
// command: the connection failed or timed out, ctx ended, the client was
// closed, or the server replied LOADING, READONLY, MASTERDOWN, BUSY, TRYAGAIN,
// CLUSTERDOWN, OOM, NOAUTH or WRONGPASS. Once a pipeline meets such an error,
// the later pipelines of the batch are not sent and their messages get the
// same kind of error. Any other error reply (WRONGTYPE: the key holds
// something other than a stream; NOPERM: the ACL forbids the key) refuses
// that one message.
//
// A batch with several messages of one key goes in waves
// (outbox.PublishWaves): a key's next message is sent once the reply to its
// previous one came, since Redis runs the XADD of a pipeline that follows a
// refused one. A keyed message whose earlier same-key message failed is not
// sent: it gets outbox.ErrHeldBack.
//
// A message with a value longer than the server's proto-max-bulk-len (512
// MiB by default; read with CONFIG GET when NewPublisher connects) is not
// sent: the server would close the connection. Its error satisfies
// outbox.IsUndeliverable. Redis strings are binary-safe, so nothing else of a
// row is refused.
//
// Redis does not deduplicate: a message published twice is two entries.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) []error {
	return outbox.PublishWaves(ctx, msgs, p.publish)
}

// publish adds msgs in pipelines of at most PipelineSize commands. No key
// appears twice in msgs (a wave of PublishWaves).
func (p *Publisher) publish(ctx context.Context, msgs []outbox.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	if err := ctx.Err(); err != nil {
		for i := range msgs {
			fail(i, outbox.Unavailable(fmt.Errorf("outboxredis: not published: %w", err)))
		}
		return errs
	}
	streams := streamCache{template: p.stream}
	cmds := make([]*redis.StringCmd, min(len(msgs), p.pipelineSize))
	for start := 0; start < len(msgs); start += p.pipelineSize {
		end := min(start+p.pipelineSize, len(msgs))
		pipe := p.rdb.Pipeline()
		for i := start; i < end; i++ {
			m := &msgs[i]
			cmds[i-start] = nil
			stream := streams.key(m.Topic)
			if err := p.check(m, stream); err != nil {
				fail(i, err)
				continue
			}
			p.headers.Check(m)
			cmds[i-start] = pipe.XAdd(ctx, p.xaddArgs(m, stream))
		}
		// Exec's own error is the first command's error; each command
		// carries its own, which is what matters here.
		_, _ = pipe.Exec(ctx)
		down := false
		for i := start; i < end; i++ {
			cmd := cmds[i-start]
			if cmd == nil || cmd.Err() == nil {
				continue
			}
			m := &msgs[i]
			err := cmd.Err()
			if unavailable(err) {
				down = true
				fail(i, outbox.Unavailable(fmt.Errorf("outboxredis: XADD %s at %s: %w%s", p.Stream(m.Topic), p.addr, err, hint(err))))
				continue
			}
			fail(i, fmt.Errorf("outboxredis: Redis refused XADD %s (msg_id %q): %w%s", p.Stream(m.Topic), m.MsgID, err, hint(err)))
		}
		if down {
			for i := end; i < len(msgs); i++ {
				fail(i, outbox.Unavailable(fmt.Errorf("outboxredis: not sent: Redis at %s became unavailable earlier in the batch", p.addr)))
			}
			break
		}
	}
	return errs
}

// xaddArgs returns the XADD arguments of m, added to stream.
func (p *Publisher) xaddArgs(m *outbox.Message, stream string) *redis.XAddArgs {
	a := &redis.XAddArgs{
		Stream: stream,
		ID:     "*",
		Values: entryValues(m, p.source),
	}
	if p.maxLen > 0 {
		a.MaxLen = p.maxLen
		a.Approx = true
	}
	return a
}

// streamCache fills the stream template for one batch, whose messages
// mostly share a topic, so that each topic's key is built once.
type streamCache struct {
	template    string
	topic, last string
	ok          bool
}

func (c *streamCache) key(topic string) string {
	if !c.ok || topic != c.topic {
		c.topic, c.last, c.ok = topic, streamKey(c.template, topic), true
	}
	return c.last
}

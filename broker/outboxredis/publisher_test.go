package outboxredis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox"
)

func newTestPublisher(t *testing.T, cfg PublisherConfig) *Publisher {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = sharedURL
	}
	pub, err := NewPublisher(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// TestWireFormat: the entry's fields, in order, are the binding the package
// documents.
func TestWireFormat(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	prefix := uniquePrefix(t, rdb)
	pub := newTestPublisher(t, PublisherConfig{Stream: prefix + ":{topic}", Source: "/orders"})
	m := outbox.Message{
		MsgID:     "order-42:OrderPaid",
		Topic:     "order.paid",
		Key:       "order-42",
		Payload:   json.RawMessage(`{"amount":"19.90","note":"größe"}`),
		Headers:   map[string]string{"traceparent": "00-abc-def-01", "Tenant-ID": "t1"},
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 123000000, time.FixedZone("CEST", 7200)),
	}
	if errs := pub.Publish(context.Background(), []outbox.Message{m}); errs != nil {
		t.Fatal(errs)
	}
	if got := pub.Stream("order.paid"); got != prefix+":order.paid" {
		t.Errorf("Stream = %q", got)
	}
	// XRANGE through a raw command keeps the fields' order.
	res, err := rdb.Do(context.Background(), "XRANGE", prefix+":order.paid", "-", "+").Slice()
	if err != nil || len(res) != 1 {
		t.Fatalf("XRANGE: %v %v", res, err)
	}
	entry := res[0].([]any)
	var got []string
	for _, v := range entry[1].([]any) {
		got = append(got, fmt.Sprint(v))
	}
	want := []string{
		"ce_specversion", "1.0",
		"ce_id", "order-42:OrderPaid",
		"ce_source", "/orders",
		"ce_type", "order.paid",
		"ce_time", "2024-05-06T05:08:09.123Z",
		"ce_partitionkey", "order-42",
		"ce_tenantid", "t1",
		"ce_traceparent", "00-abc-def-01",
		"content-type", "application/json",
		"data", `{"amount":"19.90","note":"größe"}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("fields\n got %q\nwant %q", got, want)
	}
}

func TestMaxLen(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	prefix := uniquePrefix(t, rdb)
	pub := newTestPublisher(t, PublisherConfig{URL: sharedURL + "?maxlen=10&stream=" + prefix + ":{topic}"})
	msgs := make([]outbox.Message, 1000)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprint(i), Topic: "t", Payload: json.RawMessage(`1`)}
	}
	if errs := pub.Publish(context.Background(), msgs); errs != nil {
		t.Fatal(errs)
	}
	n, err := rdb.XLen(context.Background(), prefix+":t").Result()
	if err != nil {
		t.Fatal(err)
	}
	// MAXLEN ~ trims whole nodes of the radix tree (100 entries by default).
	if n < 10 || n > 200 {
		t.Errorf("stream holds %d entries with maxlen=10, want about 10", n)
	}
}

// TestRefusedHoldsBackKey: a refused message fails alone; a later message
// with its key in a later pipeline is held back, other keys go on.
func TestRefusedHoldsBackKey(t *testing.T) {
	t.Parallel()
	rdb := sharedClient(t)
	prefix := uniquePrefix(t, rdb)
	ctx := context.Background()
	if err := rdb.Set(ctx, prefix+":bad", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pub := newTestPublisher(t, PublisherConfig{Stream: prefix + ":{topic}", PipelineSize: 2})
	msgs := []outbox.Message{
		{MsgID: "a1", Topic: "good", Key: "a", Payload: json.RawMessage(`1`)},
		{MsgID: "b1", Topic: "bad", Key: "b", Payload: json.RawMessage(`1`)},
		{MsgID: "b2", Topic: "good", Key: "b", Payload: json.RawMessage(`2`)},
		{MsgID: "a2", Topic: "good", Key: "a", Payload: json.RawMessage(`2`)},
		{MsgID: "n1", Topic: "good", Payload: json.RawMessage(`3`)},
	}
	errs := pub.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("errors %v", errs)
	}
	for i, err := range errs {
		switch i {
		case 1:
			if err == nil || outbox.IsUnavailable(err) || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), "not a stream") {
				t.Errorf("refused message: %v", err)
			}
		case 2:
			if !errors.Is(err, outbox.ErrHeldBack) || !strings.Contains(err.Error(), `"b1"`) {
				t.Errorf("message behind the refused one: %v, want ErrHeldBack", err)
			}
		default:
			if err != nil {
				t.Errorf("message %s: %v", msgs[i].MsgID, err)
			}
		}
	}
	if n, _ := rdb.XLen(ctx, prefix+":good").Result(); n != 3 {
		t.Errorf("good stream holds %d entries, want 3", n)
	}
}

func TestPublishAfterClose(t *testing.T) {
	t.Parallel()
	pub, err := NewPublisher(context.Background(), PublisherConfig{URL: sharedURL})
	if err != nil {
		t.Fatal(err)
	}
	_ = pub.Close()
	errs := pub.Publish(context.Background(), []outbox.Message{{MsgID: "x", Topic: "t", Payload: json.RawMessage(`1`)}})
	if len(errs) != 1 || !outbox.IsUnavailable(errs[0]) {
		t.Fatalf("Publish after Close: %v, want Unavailable", errs)
	}
}

// TestPublisherReconnects: after a restart of Redis the same Publisher
// publishes again, and what was acked before the restart is still there.
func TestPublisherReconnects(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	pub := newTestPublisher(t, PublisherConfig{URL: srv.URL("")})
	ctx := context.Background()
	msg := func(id string) []outbox.Message {
		return []outbox.Message{{MsgID: id, Topic: "t", Payload: json.RawMessage(`1`)}}
	}
	if errs := pub.Publish(ctx, msg("before")); errs != nil {
		t.Fatal(errs)
	}
	srv.stop()
	if errs := pub.Publish(ctx, msg("down")); len(errs) != 1 || !outbox.IsUnavailable(errs[0]) {
		t.Fatalf("Publish while Redis is down: %v, want Unavailable", errs)
	}
	srv.start()
	deadline := time.Now().Add(10 * time.Second)
	for {
		errs := pub.Publish(ctx, msg("after"))
		if errs == nil {
			break
		}
		if !outbox.IsUnavailable(errs[0]) || time.Now().After(deadline) {
			t.Fatalf("Publish after the restart: %v", errs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rdb := redis.NewClient(&redis.Options{Addr: strings.TrimSuffix(strings.TrimPrefix(srv.URL(""), "redis://"), "/0")})
	defer func() { _ = rdb.Close() }()
	entries, err := rdb.XRange(ctx, "outbox:t", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Values["ce_id"].(string))
	}
	if !slices.Equal(ids, []string{"before", "after"}) {
		t.Errorf("stream holds %v after the restart, want [before after]", ids)
	}
}

func TestUnavailableClassification(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want bool
	}{
		{context.Canceled, true},
		{redis.ErrClosed, true},
		{errors.New("dial tcp: connection refused"), true},
		{redisError("LOADING Redis is loading the dataset in memory"), true},
		{redisError("READONLY You can't write against a read only replica."), true},
		{redisError("OOM command not allowed when used memory > 'maxmemory'."), true},
		{redisError("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), true},
		{redisError("NOREPLICAS Not enough good replicas to write."), true},
		{redisError("ERR max number of clients reached"), true},
		{redisError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{redisError("NOPERM this user has no permissions to access one of the keys used as arguments"), false},
		{redisError("ERR syntax error"), false},
	}
	for _, c := range cases {
		if got := unavailable(c.err); got != c.want {
			t.Errorf("unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// redisError is an error reply, as go-redis returns it.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// TestServerWideRefusalsAreUnavailable: a Redis that refuses every write
// alike (maxmemory reached, a failed background save, too few replicas) must
// pause the relay, not spend the messages' retries and in the end mark them
// DEAD. Each case puts a private server into that state for real, checks
// that Publish says Unavailable with a hint, then lifts it and publishes.
func TestServerWideRefusalsAreUnavailable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, hint string
		refuse     func(ctx context.Context, t *testing.T, srv *server, admin *redis.Client)
		lift       func(ctx context.Context, t *testing.T, srv *server, admin *redis.Client)
	}{
		{
			name: "maxmemory", hint: "maxmemory",
			refuse: func(ctx context.Context, t *testing.T, _ *server, admin *redis.Client) {
				configSet(ctx, t, admin, "maxmemory", "1")
			},
			lift: func(ctx context.Context, t *testing.T, _ *server, admin *redis.Client) {
				configSet(ctx, t, admin, "maxmemory", "0")
			},
		},
		{
			name: "too few replicas", hint: "min-replicas-to-write",
			refuse: func(ctx context.Context, t *testing.T, _ *server, admin *redis.Client) {
				configSet(ctx, t, admin, "min-replicas-to-write", "1")
			},
			lift: func(ctx context.Context, t *testing.T, _ *server, admin *redis.Client) {
				configSet(ctx, t, admin, "min-replicas-to-write", "0")
			},
		},
		{
			// A directory where the snapshot goes makes the save's final
			// rename fail, as a full disk would make its write fail.
			name: "failed background save", hint: "background save failed",
			refuse: func(ctx context.Context, t *testing.T, srv *server, admin *redis.Client) {
				if err := os.MkdirAll(filepath.Join(srv.dir, "dump.rdb", "in-the-way"), 0o755); err != nil {
					t.Fatal(err)
				}
				configSet(ctx, t, admin, "save", "3600 1")
				waitSave(ctx, t, admin, "err")
			},
			lift: func(ctx context.Context, t *testing.T, srv *server, admin *redis.Client) {
				if err := os.RemoveAll(filepath.Join(srv.dir, "dump.rdb")); err != nil {
					t.Fatal(err)
				}
				waitSave(ctx, t, admin, "ok")
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t)
			pub := newTestPublisher(t, PublisherConfig{URL: srv.URL("")})
			admin := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", srv.port)})
			defer func() { _ = admin.Close() }()
			ctx := context.Background()
			msgs := []outbox.Message{{MsgID: "m1", Topic: "t", Payload: json.RawMessage(`1`)}, {MsgID: "m2", Topic: "t", Payload: json.RawMessage(`2`)}}
			c.refuse(ctx, t, srv, admin)
			errs := pub.Publish(ctx, msgs)
			if len(errs) != len(msgs) {
				t.Fatalf("Publish while Redis refuses writes: %v, want an error per message", errs)
			}
			for _, err := range errs {
				if !outbox.IsUnavailable(err) || !strings.Contains(err.Error(), c.hint) {
					t.Fatalf("Publish while Redis refuses writes: %v, want Unavailable with a hint containing %q", err, c.hint)
				}
			}
			c.lift(ctx, t, srv, admin)
			if errs := pub.Publish(ctx, msgs); errs != nil {
				t.Fatalf("Publish once Redis takes writes again: %v", errs)
			}
		})
	}
}

func configSet(ctx context.Context, t *testing.T, admin *redis.Client, name, value string) {
	t.Helper()
	if err := admin.ConfigSet(ctx, name, value).Err(); err != nil {
		t.Fatalf("CONFIG SET %s %s: %v", name, value, err)
	}
}

// waitSave starts a background save and waits until Redis reports its
// outcome as want ("ok" or "err").
func waitSave(ctx context.Context, t *testing.T, admin *redis.Client, want string) {
	t.Helper()
	if err := admin.BgSave(ctx).Err(); err != nil {
		t.Fatalf("BGSAVE: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := admin.Info(ctx, "persistence").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "rdb_bgsave_in_progress:0") && strings.Contains(info, "rdb_last_bgsave_status:"+want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the background save did not end with %q:\n%s", want, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOverProtoMaxBulkLen: a value over the server's proto-max-bulk-len
// (which it answers with a protocol error, closing the connection) is
// undeliverable and not sent; the messages around it and the next Publish
// are stored.
func TestOverProtoMaxBulkLen(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", srv.port)})
	defer admin.Close()
	configSet(ctx, t, admin, "proto-max-bulk-len", "1mb") // the least Redis allows
	big := json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`)
	// The server answers "invalid bulk length" and closes the connection,
	// which the client may see first as a reset while it still writes.
	if err := admin.XAdd(ctx, &redis.XAddArgs{Stream: "raw", Values: []any{"data", []byte(big)}}).Err(); err == nil {
		t.Fatal("the server took a value over proto-max-bulk-len")
	}
	pub, err := NewPublisher(ctx, PublisherConfig{URL: srv.URL("?stream=s:{topic}")})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	msgs := []outbox.Message{
		{MsgID: "a", Topic: "t", Key: "k", Payload: json.RawMessage(`1`)},
		{MsgID: "poison", Topic: "t", Payload: big},
		{MsgID: "b", Topic: "t", Key: "k", Payload: json.RawMessage(`2`)},
	}
	errs := pub.Publish(ctx, msgs)
	if len(errs) != 3 || errs[0] != nil || errs[2] != nil || !outbox.IsUndeliverable(errs[1]) || outbox.IsUnavailable(errs[1]) {
		t.Fatalf("Publish = %v, want an undeliverable error for the poison only", errs)
	}
	if !strings.Contains(errs[1].Error(), "over the 1048576 bytes of one argument the server takes (proto-max-bulk-len)") {
		t.Errorf("error %q does not say the limit", errs[1])
	}
	if errs := pub.Publish(ctx, []outbox.Message{{MsgID: "c", Topic: "t", Payload: json.RawMessage(`3`)}}); errs != nil {
		t.Fatalf("the next Publish: %v", errs)
	}
	if n, err := admin.XLen(ctx, "s:t").Result(); err != nil || n != 3 {
		t.Fatalf("the stream holds %d entries (%v), want 3", n, err)
	}
}

package outboxredis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	c, p, err := parseURL("redis://user:secret@redis.example:6380/3?stream=app:{topic}&maxlen=1000&dead=dl:{group}&minidle=5s&maxdeliveries=7&dial_timeout=2s&pool_size=4", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	opts := c.simple
	if opts.Addr != "redis.example:6380" || opts.DB != 3 || opts.Username != "user" || opts.Password != "secret" {
		t.Errorf("options: addr %q db %d user %q", opts.Addr, opts.DB, opts.Username)
	}
	if opts.DialTimeout != 2*time.Second || opts.PoolSize != 4 || !opts.ContextTimeoutEnabled || opts.TLSConfig != nil {
		t.Errorf("options: dial_timeout %s pool_size %d context timeouts %v TLS %v", opts.DialTimeout, opts.PoolSize, opts.ContextTimeoutEnabled, opts.TLSConfig)
	}
	want := params{stream: "app:{topic}", maxLen: 1000, dead: "dl:{group}", minIdle: 5 * time.Second, maxDeliveries: 7}
	if p != want {
		t.Errorf("params %+v, want %+v", p, want)
	}

	c, _, err = parseURL("rediss://redis.example", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	opts = c.simple
	if opts.Addr != "redis.example:6379" || opts.TLSConfig == nil || opts.TLSConfig.ServerName != "redis.example" {
		t.Errorf("rediss: addr %q TLS %+v", opts.Addr, opts.TLSConfig)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	pc, _, err := PublisherConfig{URL: "redis://localhost"}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if pc.Source != "/outbox" || pc.Stream != DefaultStream || pc.MaxLen != 0 || pc.PipelineSize != DefaultPipelineSize {
		t.Errorf("publisher defaults: %+v", pc)
	}
	// A field that is set wins over the URL's parameter.
	pc, _, err = PublisherConfig{URL: "redis://localhost?stream=url:{topic}&maxlen=10", Stream: "field:{topic}"}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if pc.Stream != "field:{topic}" || pc.MaxLen != 10 {
		t.Errorf("publisher: stream %q maxlen %d", pc.Stream, pc.MaxLen)
	}

	sc, _, err := SubscriberConfig{URL: "redis://localhost", Group: "g", Topic: "t"}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if sc.Stream != DefaultStream || sc.DeadLetterStream != DefaultDeadLetterStream || sc.MaxDeliveries != 5 ||
		sc.MinIdle != 30*time.Second || sc.Block != time.Second || sc.BatchSize != 64 || sc.StopTimeout != 30*time.Second || sc.Consumer == "" {
		t.Errorf("subscriber defaults: %+v", sc)
	}
	sc, _, err = SubscriberConfig{URL: "redis://localhost?minidle=100ms&maxdeliveries=2", Group: "g", Topic: "t"}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if sc.MinIdle != 100*time.Millisecond || sc.Block != 50*time.Millisecond || sc.MaxDeliveries != 2 {
		t.Errorf("subscriber from URL: minidle %s block %s maxdeliveries %d", sc.MinIdle, sc.Block, sc.MaxDeliveries)
	}
	if got := streamKey(DefaultStream, "order.paid"); got != "outbox:order.paid" {
		t.Errorf("stream key %q", got)
	}
	if got := deadKey(DefaultDeadLetterStream, "outbox:order.paid", "billing", "order.paid"); got != "outbox:order.paid:dead:billing" {
		t.Errorf("dead-letter key %q", got)
	}
}

// TestConfigErrors: each mistake gives one clear error that names what to
// fix and never shows the password.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	const pw = "s3cret-pw"
	pub := func(url string) error { _, _, err := PublisherConfig{URL: url}.resolve(); return err }
	sub := func(cfg SubscriberConfig) error {
		if cfg.URL == "" {
			cfg.URL = "redis://localhost"
		}
		_, _, err := cfg.resolve()
		return err
	}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"empty URL", pub(""), "URL is empty"},
		{"bad URL", pub("redis://u:" + pw + "@host:port:x"), "not a valid URL"},
		{"scheme", pub("http://u:" + pw + "@localhost"), `scheme "http"; use redis://`},
		{"no host", pub("redis:///0"), "has no host"},
		{"maxlen", pub("redis://u:" + pw + "@localhost?maxlen=-1"), "maxlen=\"-1\" is not a positive integer"},
		{"maxlen text", pub("redis://localhost?maxlen=lots"), "maxlen=\"lots\""},
		{"empty stream", pub("redis://localhost?stream="), "stream is empty"},
		{"minidle", pub("redis://localhost?minidle=soon"), "minidle=\"soon\" is not a positive duration"},
		{"maxdeliveries", pub("redis://localhost?maxdeliveries=0"), "maxdeliveries=\"0\""},
		{"unknown parameter", pub("redis://u:" + pw + "@localhost?topic=x"), "unexpected option: topic"},
		{"bad database", pub("redis://u:" + pw + "@localhost/abc"), "invalid database number"},
		{"publisher MaxLen", func() error { _, _, err := PublisherConfig{URL: "redis://localhost", MaxLen: -5}.resolve(); return err }(), "PublisherConfig.MaxLen is -5"},
		{"publisher PipelineSize", func() error {
			_, _, err := PublisherConfig{URL: "redis://localhost", PipelineSize: -1}.resolve()
			return err
		}(), "PublisherConfig.PipelineSize is -1"},
		{"no group", sub(SubscriberConfig{Topic: "t"}), "SubscriberConfig.Group is empty"},
		{"no topic", sub(SubscriberConfig{Group: "g"}), "SubscriberConfig.Topic is empty"},
		{"MaxDeliveries", sub(SubscriberConfig{Group: "g", Topic: "t", MaxDeliveries: -1}), "MaxDeliveries is -1"},
		{"MinIdle", sub(SubscriberConfig{Group: "g", Topic: "t", MinIdle: -time.Second}), "MinIdle is -1s"},
		{"Block", sub(SubscriberConfig{Group: "g", Topic: "t", Block: time.Microsecond}), "Block is 1µs"},
		{"BatchSize", sub(SubscriberConfig{Group: "g", Topic: "t", BatchSize: -1}), "BatchSize is -1"},
		{"StopTimeout", sub(SubscriberConfig{Group: "g", Topic: "t", StopTimeout: -time.Second}), "StopTimeout is -1s"},
	}
	for _, c := range cases {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		msg := c.err.Error()
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: error %q, want it to contain %q", c.name, msg, c.want)
		}
		if strings.Contains(msg, pw) {
			t.Errorf("%s: error shows the password: %q", c.name, msg)
		}
		if strings.Contains(msg, "\n") {
			t.Errorf("%s: error is not one line: %q", c.name, msg)
		}
		if !errors.Is(c.err, ErrConfig) {
			t.Errorf("%s: error %q does not satisfy errors.Is(err, ErrConfig)", c.name, msg)
		}
	}
	// A stream template without {topic} needs no topic.
	if err := sub(SubscriberConfig{Group: "g", Stream: "all-events"}); err != nil {
		t.Errorf("fixed stream without topic: %v", err)
	}
}

// TestNewPublisherDown: no server at the address is an Unavailable error of
// one line, without the password.
func TestNewPublisherDown(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	url := "redis://u:s3cret-pw@" + strings.TrimPrefix(srv.URL(""), "redis://")
	srv.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := NewPublisher(ctx, PublisherConfig{URL: url})
	if err == nil || !outbox.IsUnavailable(err) {
		t.Fatalf("NewPublisher with no server: %v, want an Unavailable error", err)
	}
	if msg := err.Error(); strings.Contains(msg, "s3cret-pw") || strings.Contains(msg, "\n") || !strings.Contains(msg, "cannot reach Redis at 127.0.0.1:") {
		t.Errorf("error %q", msg)
	}
	_, err = NewSubscriber(ctx, SubscriberConfig{URL: url, Group: "g", Topic: "t"})
	if err == nil || !outbox.IsUnavailable(err) {
		t.Fatalf("NewSubscriber with no server: %v, want an Unavailable error", err)
	}
}

// TestNewPublisherWrongPassword: refused credentials are a plain error that
// says what to check, not Unavailable, and do not show the password.
func TestNewPublisherWrongPassword(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	admin := redis.NewClient(&redis.Options{Addr: strings.TrimSuffix(strings.TrimPrefix(srv.URL(""), "redis://"), "/0")})
	defer func() { _ = admin.Close() }()
	if err := admin.ConfigSet(context.Background(), "requirepass", "right-pw").Err(); err != nil {
		t.Fatal(err)
	}
	url := "redis://default:wrong-pw@" + strings.TrimPrefix(srv.URL(""), "redis://")
	_, err := NewPublisher(context.Background(), PublisherConfig{URL: url})
	if err == nil || outbox.IsUnavailable(err) {
		t.Fatalf("NewPublisher with a wrong password: %v, want a plain error", err)
	}
	if msg := err.Error(); strings.Contains(msg, "wrong-pw") || !strings.Contains(msg, "check the user and password") {
		t.Errorf("error %q", msg)
	}
	pub, err := NewPublisher(context.Background(), PublisherConfig{URL: strings.Replace(url, "wrong-pw", "right-pw", 1)})
	if err != nil {
		t.Fatalf("NewPublisher with the right password: %v", err)
	}
	_ = pub.Close()
}

package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxredis"
	"github.com/outbox-go/outbox/brokertest"
)

// TestRedis runs the scenario through Redis Streams on a private
// redis-server (its own port and directory, append-only file fsynced on
// every write, so that what it acknowledged survives Restart).
func TestRedis(t *testing.T) {
	srv := startPrivate(t, redisSpec)
	b := redisBroker("redis://" + srv.addr() + "/0?stream=e2e:{topic}&minidle=200ms")
	b.Restart = func(t *testing.T) { srv.restart(t) }
	Run(t, b)
}

// redisBroker publishes and subscribes through the Redis at url.
func redisBroker(url string) Broker {
	const topic = "transfer.done"
	return Broker{
		Name:  "redis",
		Topic: topic,
		NewPublisher: func(t *testing.T) outbox.Publisher {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := outboxredis.NewPublisher(ctx, outboxredis.PublisherConfig{URL: url})
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			return p
		},
		NewSubscriber: func(t *testing.T, group string) brokertest.Subscriber {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := outboxredis.NewSubscriber(ctx, outboxredis.SubscriberConfig{URL: url, Group: group, Topic: topic,
				// A failed entry holds the subscriber for the delay; the
				// harness fails about one delivery in eight.
				RedeliveryDelay: 10 * time.Millisecond})
			if err != nil {
				t.Fatalf("NewSubscriber: %v", err)
			}
			return s
		},
	}
}

// redisSpec is a redis-server whose append-only file is fsynced on every
// write, stopped with SIGTERM (it flushes the file) on Restart.
var redisSpec = privateSpec{
	name: "redis-server", env: "OUTBOX_REDIS_SERVER", bin: "redis-server",
	args: func(port int, dir string) []string {
		return []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--dir", dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
			"--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log")}
	},
	ready: redisPing, wait: 15 * time.Second, log: "redis.log", term: true,
}

// redisPing sends PING in the inline protocol and expects +PONG: the
// server is up and has loaded its data (it answers LOADING until then).
func redisPing(port int) error {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", buf[:n])
	}
	return nil
}

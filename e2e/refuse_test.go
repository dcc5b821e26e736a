//go:build chaos

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/outbox-go/outbox/broker/outboxamqp"
	"github.com/outbox-go/outbox/brokertest"
)

// A refusal is the broker saying no to every publish for a while, the way a
// real broker does, with no hook in the relays: each message it meets spends
// a retry and comes back after its backoff. Each broker's refusal leaves a
// mark in the rows' last_error (refusedLike), so that the run can tell that
// the relays met it.
//
//   - NATS: the stream's max_msg_size drops to 1 byte (PubAck error, "refused
//     by stream").
//   - RabbitMQ: the group's queue is unbound from the exchange, so that every
//     mandatory publish comes back (basic.return, NO_ROUTE).
//   - Redis: the default user loses XADD (NOPERM).
//   - MQTT: the ACL stops allowing publishes and mosquitto reloads it on
//     SIGHUP (PUBACK 0x87, not authorized).
type refusal struct {
	what string
	// like matches the last_error of a row the refusal met.
	like string
	// start makes the broker refuse every publish until restore is called;
	// either fails the test if it cannot do its part.
	// subs are the run's subscribers, one per group.
	start func(t *testing.T, subs ...brokertest.Subscriber) (restore func())
}

func natsRefusal(addr, stream string) *refusal {
	return &refusal{
		what: fmt.Sprintf("stream %s's max_msg_size set to 1 byte", stream),
		like: "%refused by stream%",
		start: func(t *testing.T, _ ...brokertest.Subscriber) func() {
			t.Helper()
			nc, err := nats.Connect("nats://"+addr, nats.Timeout(5*time.Second))
			if err != nil {
				t.Fatalf("refusal: connect to NATS: %v", err)
			}
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			// set sets the stream's max_msg_size and returns the one before.
			set := func(size int32) (was int32, err error) {
				err = retryFor(10*time.Second, func(ctx context.Context) error {
					s, err := js.Stream(ctx, stream)
					if err != nil {
						return err
					}
					cfg := s.CachedInfo().Config
					was, cfg.MaxMsgSize = cfg.MaxMsgSize, size
					_, err = js.UpdateStream(ctx, cfg)
					return err
				})
				return was, err
			}
			was, err := set(1)
			if err != nil {
				t.Fatalf("refusal: set stream %s's max_msg_size: %v", stream, err)
			}
			return func() {
				defer nc.Close()
				if _, err := set(was); err != nil {
					t.Fatalf("refusal: restore stream %s's max_msg_size: %v", stream, err)
				}
			}
		},
	}
}

func amqpRefusal(url, exchange string) *refusal {
	return &refusal{
		what: fmt.Sprintf("the groups' queues unbound from exchange %q", exchange),
		like: "%the broker returned the message%",
		start: func(t *testing.T, subs ...brokertest.Subscriber) func() {
			t.Helper()
			var queues []string
			for _, sub := range subs {
				s, ok := sub.(*outboxamqp.Subscriber)
				if !ok {
					t.Fatalf("refusal: the subscriber is a %T, not an outboxamqp.Subscriber", sub)
				}
				queues = append(queues, s.Queue())
			}
			conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
			if err != nil {
				t.Fatalf("refusal: connect to RabbitMQ: %v", err)
			}
			ch, err := conn.Channel()
			if err != nil {
				conn.Close()
				t.Fatal(err)
			}
			for _, q := range queues {
				if err := ch.QueueUnbind(q, outboxamqp.DefaultBindingKey, exchange, nil); err != nil {
					conn.Close()
					t.Fatalf("refusal: unbind queue %q: %v", q, err)
				}
			}
			return func() {
				defer conn.Close()
				for _, q := range queues {
					if err := ch.QueueBind(q, outboxamqp.DefaultBindingKey, exchange, false, nil); err != nil {
						t.Fatalf("refusal: bind queue %q again: %v", q, err)
					}
				}
			}
		},
	}
}

func redisRefusal(addr string) *refusal {
	return &refusal{
		what: "XADD taken from the default user's ACL",
		like: "%NOPERM%",
		start: func(t *testing.T, _ ...brokertest.Subscriber) func() {
			t.Helper()
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			set := func(rule string) error {
				return retryFor(10*time.Second, func(ctx context.Context) error {
					return rdb.Do(ctx, "ACL", "SETUSER", "default", rule).Err()
				})
			}
			if err := set("-xadd"); err != nil {
				rdb.Close()
				t.Fatalf("refusal: ACL SETUSER default -xadd: %v", err)
			}
			return func() {
				defer rdb.Close()
				if err := set("+xadd"); err != nil {
					t.Fatalf("refusal: ACL SETUSER default +xadd: %v", err)
				}
			}
		},
	}
}

func mqttRefusal(srv *privateServer) *refusal {
	return &refusal{
		what: "publishing taken from mosquitto's ACL (reloaded on SIGHUP)",
		like: "%allow this client to publish%",
		start: func(t *testing.T, _ ...brokertest.Subscriber) func() {
			t.Helper()
			setMosquittoACL(t, srv.dir, "read")
			signalPrivate(t, srv, syscall.SIGHUP)
			return func() {
				setMosquittoACL(t, srv.dir, "readwrite")
				signalPrivate(t, srv, syscall.SIGHUP)
			}
		},
	}
}

// setMosquittoACL gives every client access to every topic (mosquittoSpec's
// acl_file).
func setMosquittoACL(t *testing.T, dir, access string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "acl"), []byte("topic "+access+" #\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// signalPrivate sends sig to the private server.
func signalPrivate(t *testing.T, s *privateServer, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		t.Fatalf("refusal: %s is not running", s.spec.name)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("refusal: signal %s: %v", s.spec.name, err)
	}
}

// retryFor calls fn until it succeeds or d has passed: the broker may have
// just been restarted by the chaos.
func retryFor(d time.Duration, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := fn(ctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

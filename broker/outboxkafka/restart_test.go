package outboxkafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
)

// privateCluster is a kfake cluster of one test, on a fixed port and with its
// data in a directory, so that it can be stopped and started again with the
// same address and contents, the way a Kafka broker restarts.
type privateCluster struct {
	t    testing.TB
	port int
	dir  string
	mu   sync.Mutex
	c    *kfake.Cluster
}

func newPrivateCluster(t testing.TB) *privateCluster {
	pc := &privateCluster{t: t, port: freePort(t), dir: t.TempDir()}
	pc.start()
	t.Cleanup(pc.stop)
	return pc
}

func (pc *privateCluster) url() string { return fmt.Sprintf("kafka://127.0.0.1:%d", pc.port) }

func (pc *privateCluster) start() {
	pc.t.Helper()
	var err error
	for range 50 { // the old listener's port may take a moment to be free
		var c *kfake.Cluster
		c, err = kfake.NewCluster(kfake.Ports(pc.port), kfake.DataDir(pc.dir), kfake.SyncWrites())
		if err == nil {
			pc.mu.Lock()
			pc.c = c
			pc.mu.Unlock()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	pc.t.Fatalf("starting kfake on port %d: %v", pc.port, err)
}

func (pc *privateCluster) stop() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.c != nil {
		pc.c.Close()
		pc.c = nil
	}
}

func TestRestart(t *testing.T) {
	t.Parallel()
	pc := newPrivateCluster(t)
	topic := newTopic(t, pc.url(), 3)
	log := testLogger(t)
	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: pc.url(), Timeout: 5 * time.Second, Logger: log})
	sub := newSubscriber(t, outboxkafka.SubscriberConfig{URL: pc.url(), Group: "restart", Topics: []string{topic}, Logger: log})

	var mu sync.Mutex
	seen := map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() {
		runDone <- sub.Run(ctx, func(_ context.Context, m outbox.Message) error {
			mu.Lock()
			seen[m.MsgID]++
			mu.Unlock()
			return nil
		})
	}()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	batch := func(prefix string) []outbox.Message {
		msgs := make([]outbox.Message, 100)
		for i := range msgs {
			msgs[i] = outbox.Message{MsgID: fmt.Sprintf("%s-%d", prefix, i), Topic: topic, Key: fmt.Sprint(i % 7),
				Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
		}
		return msgs
	}
	// publishUntilAcked publishes msgs until every one is acked, as the
	// relay does: Unavailable messages are published again.
	publishUntilAcked := func(msgs []outbox.Message) {
		deadline := time.Now().Add(60 * time.Second)
		for len(msgs) > 0 {
			pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
			errs := pub.Publish(pctx, msgs)
			pcancel()
			var again []outbox.Message
			for i, err := range errs {
				if err == nil {
					continue
				}
				if !outbox.IsUnavailable(err) && !outbox.IsPermanent(err) && !isHeldBack(err) {
					t.Fatalf("Publish across a restart: %s: %v (want acked or Unavailable)", msgs[i].MsgID, err)
				}
				again = append(again, msgs[i])
			}
			msgs = again
			if len(msgs) > 0 && time.Now().After(deadline) {
				t.Fatalf("%d messages still not acked a minute after the restart", len(msgs))
			}
		}
	}
	waitSeen := func(msgs []outbox.Message) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			mu.Lock()
			missing := 0
			for _, m := range msgs {
				if seen[m.MsgID] == 0 {
					missing++
				}
			}
			mu.Unlock()
			if missing == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d messages not consumed", missing, len(msgs))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	before := batch("before")
	publishUntilAcked(before)
	waitSeen(before)

	// While the broker is down, Publish reports Unavailable within its deadline.
	pc.stop()
	down := batch("down")
	dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
	start := time.Now()
	errs := pub.Publish(dctx, down)
	dcancel()
	if elapsed := time.Since(start); elapsed > 4*time.Second {
		t.Errorf("Publish with the broker down took %s with a 2s deadline", elapsed)
	}
	if len(errs) != len(down) {
		t.Fatalf("Publish with the broker down returned %d errors for %d messages", len(errs), len(down))
	}
	for i, err := range errs {
		if !outbox.IsUnavailable(err) && !isHeldBack(err) {
			t.Fatalf("Publish with the broker down: %s: %v, want outbox.Unavailable", down[i].MsgID, err)
		}
	}
	t.Logf("with the broker down: %v", errs[0])
	pc.start()

	after := append(down, batch("after")...)
	publishUntilAcked(after)
	waitSeen(after)
	mu.Lock()
	defer mu.Unlock()
	twice := map[string]int{}
	for id, n := range seen {
		if n > 1 {
			twice[strings.SplitN(id, "-", 2)[0]]++
		}
	}
	t.Logf("%d distinct messages consumed, %d deliveries in all; delivered more than once: %v", len(seen), sum(seen), twice)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

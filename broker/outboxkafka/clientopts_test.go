package outboxkafka_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
)

// TestSubscriberClientOpts: the subscriber's client takes options of the
// caller's (here SASL, which the URL does not carry, and a dialer), and keeps
// its own consumer group even when the options name another.
func TestSubscriberClientOpts(t *testing.T) {
	t.Parallel()
	const pass = "0pts-pa55"
	addr := saslCluster(t, "relay", pass)
	auth := kgo.SASL(plain.Auth{User: "relay", Pass: pass}.AsMechanism())

	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: "kafka://relay:" + pass + "@" + addr, Destination: "h-kcreds"})
	msg := outbox.Message{MsgID: "h-kopts-1", Topic: "h-kcreds", Payload: []byte(`{"n":1}`), CreatedAt: time.Now()}
	if errs := pub.Publish(t.Context(), []outbox.Message{msg}); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}

	var dials atomic.Int64
	var d net.Dialer
	sub := newSubscriber(t, outboxkafka.SubscriberConfig{URL: "kafka://" + addr, Group: "h-kopts", Topics: []string{"h-kcreds"},
		ClientOpts: []kgo.Opt{auth, kgo.ConsumerGroup("h-not-mine"), kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, host)
		})}})
	var mu sync.Mutex
	var got []string
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(ctx, func(_ context.Context, m outbox.Message) error {
			mu.Lock()
			got = append(got, m.MsgID)
			mu.Unlock()
			cancel()
			return nil
		})
	}()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, []string{"h-kopts-1"}) {
		t.Fatalf("the subscriber handled %v, want [h-kopts-1]", got)
	}
	if dials.Load() == 0 {
		t.Error("the subscriber's client did not use the dialer of ClientOpts")
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), auth)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	groups, err := kadm.NewClient(cl).ListGroups(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if names := groups.Groups(); !slices.Contains(names, "h-kopts") || slices.Contains(names, "h-not-mine") {
		t.Errorf("groups %v: want the subscriber's own, h-kopts, and not the one ClientOpts named", names)
	}
}

package outboxnats

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/brokertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// features says what JetStream does with this adapter (see doc.go): one
// subscriber handles messages one at a time in stream order, so same-key
// order holds while no delivery fails; the stream drops a msg_id published
// again within its duplicate window; the dead-letter path is a stream of its
// own; subscribers of a group share one durable consumer, which gives a
// message one of them naks (or leaves unacked for AckWait) to another.
var features = brokertest.Features{Ordered: true, Dedup: true, DeadLetter: true, SharedGroup: true, HandOver: true}

// suiteAckWait is the AckWait of the conformance suite's groups, shorter
// than the default 30s so that a message left in a stopped subscriber's
// hands comes back well within the suite's Timeout.
const suiteAckWait = 10 * time.Second

func TestConformance(t *testing.T) {
	requireShared(t)
	brokertest.Run(t, brokertest.Env{
		Features: features,
		// Well over the suite's AckWait (suiteAckWait): a message the broker
		// was still sending when a subscriber stopped reaches the group
		// again only after AckWait (see Prefetch), and StoppedBeforeSuccess's
		// wait for it starts a while after that message was sent (the
		// stopped subscriber's last in-progress signal may come later).
		Timeout: 45 * time.Second,
		Setup: func(t *testing.T) *brokertest.Bundle {
			return newBundle(t, sharedURL())
		},
	})
}

func TestBackoff(t *testing.T) {
	requireShared(t)
	var urls sync.Map // *brokertest.Bundle -> its URL
	brokertest.RunBackoff(t, brokertest.BackoffEnv{
		Setup: func(t *testing.T) *brokertest.Bundle {
			u, _ := testURL(t, sharedURL())
			b := newBundleAt(t, u)
			urls.Store(b, u)
			return b
		},
		NewSubscriber: func(t *testing.T, b *brokertest.Bundle, o brokertest.BackoffOptions) brokertest.Subscriber {
			u, _ := urls.Load(b)
			return newBackoffSubscriber(t, u.(string), o, 0)
		},
	})
}

const suiteTopic = "suite.events"

// newBundle builds the suite's view of the adapter on streams of its own.
func newBundle(t *testing.T, serverURL string) *brokertest.Bundle {
	t.Helper()
	u, _ := testURL(t, serverURL)
	return newBundleAt(t, u)
}

// newBundleAt is newBundle on the streams of the test URL u.
func newBundleAt(t *testing.T, u string) *brokertest.Bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pub, err := NewPublisher(ctx, PublisherConfig{URL: u})
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return &brokertest.Bundle{
		Publisher: pub,
		Topic:     suiteTopic,
		NewSubscriber: func(t *testing.T, opts brokertest.SubscriberOptions) brokertest.Subscriber {
			ackWait := opts.RedeliverAfter
			if ackWait == 0 {
				ackWait = suiteAckWait
			}
			return newAckWaitSubscriber(t, u, opts.Group, opts.MaxDeliveries, ackWait)
		},
		// Closing the connection leaves the messages in hand unacked: the
		// consumer delivers them again after AckWait.
		Kill: func(sub brokertest.Subscriber) { _ = sub.(*Subscriber).Close() },
		Unreachable: func(t *testing.T) outbox.Publisher {
			// NewPublisher needs the server, so build the publisher against
			// a private one and then stop it: what is left is a publisher
			// pointed at an address where no broker listens.
			srv := startPrivateServer(t)
			pu, _ := testURL(t, srv.URL())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := NewPublisher(ctx, PublisherConfig{URL: pu})
			if err != nil {
				t.Fatalf("NewPublisher on the private server: %v", err)
			}
			t.Cleanup(func() { _ = p.Close() })
			srv.Stop()
			return p
		},
		Refused: func() outbox.Message {
			// Over the server's max_payload (1 MiB by default).
			return outbox.Message{
				MsgID:   "refused-too-large",
				Topic:   suiteTopic,
				Payload: []byte(`"` + strings.Repeat("x", 1<<20) + `"`),
			}
		},
		Undeliverable: func() []outbox.Message {
			return []outbox.Message{
				// CR LF in the subject would end the HPUB line early.
				{MsgID: "crlf-topic", Topic: suiteTopic + "\r\nPUB x 1", Payload: []byte(`{}`)},
				// Over max_control_line: the server would close the connection.
				{MsgID: "long-topic", Topic: suiteTopic + "." + strings.Repeat("t", 5000), Payload: []byte(`{}`)},
				// Over max_payload with its headers.
				{MsgID: "big-header", Topic: suiteTopic, Payload: []byte(`{}`), Headers: map[string]string{"big": strings.Repeat("x", 1<<20)}},
			}
		},
		DeadLetters: func(ctx context.Context, group string) ([]outbox.Message, error) {
			return readDeadLetters(ctx, u, group)
		},
	}
}

func newTestSubscriber(t testing.TB, u, group string, maxDeliveries int) *Subscriber {
	t.Helper()
	return newAckWaitSubscriber(t, u, group, maxDeliveries, 0)
}

// newAckWaitSubscriber is newTestSubscriber with the group's AckWait (zero:
// the default).
func newAckWaitSubscriber(t testing.TB, u, group string, maxDeliveries int, ackWait time.Duration) *Subscriber {
	t.Helper()
	// Short delays, and the dead-letter subject at the MaxDeliveries-th
	// failure.
	return newBackoffSubscriber(t, u, brokertest.BackoffOptions{Group: group, MaxDeliveries: maxDeliveries,
		RedeliveryDelay: 50 * time.Millisecond, RedeliveryDelayMax: 200 * time.Millisecond, DeadLetterAfter: -1}, ackWait)
}

// newBackoffSubscriber is a subscriber with the redelivery settings of o.
func newBackoffSubscriber(t testing.TB, u string, o brokertest.BackoffOptions, ackWait time.Duration) *Subscriber {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := NewSubscriber(ctx, SubscriberConfig{
		URL:                u,
		Group:              o.Group,
		Topic:              suiteTopic,
		MaxDeliveries:      o.MaxDeliveries,
		RedeliveryDelay:    o.RedeliveryDelay,
		RedeliveryDelayMax: o.RedeliveryDelayMax,
		DeadLetterAfter:    o.DeadLetterAfter,
		AckWait:            ackWait,
		Logger:             quiet(),
	})
	if err != nil {
		t.Fatalf("NewSubscriber: %v", err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// readDeadLetters returns the messages on group's dead-letter subject, read
// from the dead-letter stream by sequence.
func readDeadLetters(ctx context.Context, u, group string) ([]outbox.Message, error) {
	st, err := SubscriberConfig{URL: u, Group: group}.settings()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(st.url.servers)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, st.DeadLetterStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	state := stream.CachedInfo().State
	subject := st.deadPrefix + st.consumer
	var out []outbox.Message
	for seq := state.FirstSeq; seq <= state.LastSeq && state.Msgs > 0; seq++ {
		raw, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if raw.Subject != subject {
			continue
		}
		m, err := decodeMessage(raw.Header, raw.Data)
		if err != nil {
			// A dead letter that was not an event: keep what there is.
			m = outbox.Message{MsgID: raw.Header.Get(headerMsgID), Payload: raw.Data}
		}
		out = append(out, m)
	}
	return out, nil
}

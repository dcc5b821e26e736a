package demo

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxnats"
)

// deleteStreams removes the demo's streams, so that runs against a shared
// server leave nothing behind.
func deleteStreams(url string, names ...string) {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range names {
		_ = js.DeleteStream(ctx, name)
	}
}

// runNATS is the transfer scenario with a real broker in the middle: the relay
// publishes to JetStream (after two timeouts), and a JetStream subscriber
// applies the message through the inbox. The first ack is lost after the
// commit (the handler reports a failure once), so JetStream delivers the
// message a second time, and the inbox discards it.
func (d *demo) runNATS(ctx context.Context, out io.Writer, natsURL string, keep bool, dir string) error {
	t := d.text
	say := func(key string, args ...any) { fmt.Fprintf(out, t[key]+"\n", args...) }
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	say("broker", natsURL)
	if err := d.transfer(ctx, "alice", "bob", 100, "m-1"); err != nil {
		return fmt.Errorf("demo: transfer: %w", err)
	}
	say("committed")
	if err := d.show(ctx, out); err != nil {
		return err
	}

	// Each demo run gets streams of its own, so that it also works against
	// a shared server (a nats:// URL) and can be run again.
	suffix := streamSuffix()
	subject, stream := "demo"+suffix+".{topic}", "DEMO_"+suffix
	real, err := outboxnats.NewPublisher(ctx, outboxnats.PublisherConfig{
		URL: natsURL, Subject: subject, Stream: stream, MaxAge: time.Hour,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer real.Close() //nolint:errcheck // the demo is over; its figures are printed
	defer deleteStreams(natsURL, stream, "DEMO_DEAD_"+suffix)
	sub, err := outboxnats.NewSubscriber(ctx, outboxnats.SubscriberConfig{
		URL: natsURL, Group: "points", Subject: subject, Stream: stream,
		DeadLetterSubject: "demodead" + suffix + ".{group}", DeadLetterStream: "DEMO_DEAD_" + suffix,
		RedeliveryDelay: 10 * time.Millisecond, Logger: quiet,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer sub.Close() //nolint:errcheck // the demo is over; its figures are printed

	// The relay's publisher: the first two attempts time out, as in the seed.
	pub := failingFirst(2, errors.New(t["timeout"]), real)
	if err := d.relayRounds(ctx, out, pub); err != nil {
		return err
	}

	fmt.Fprintln(out)
	say("consume")
	if err := d.consumeTwice(ctx, out, sub); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if err := d.show(ctx, out); err != nil {
		return err
	}
	if keep {
		fmt.Fprintf(out, "\n"+t["kept"]+"\n", dir)
	}
	return nil
}

// failingFirst publishes through pub, except that the first n batches fail,
// each message with err.
func failingFirst(n int, err error, pub outbox.Publisher) outbox.Publisher {
	return outbox.BatchPublishFunc(func(ctx context.Context, msgs []outbox.Message) []error {
		if n > 0 {
			n--
			errs := make([]error, len(msgs))
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
		return pub.Publish(ctx, msgs)
	})
}

// consumeTwice runs sub until it has delivered the message twice, or 30s
// have passed: the handler applies the message through the inbox, then
// fails the first delivery as a lost ack would, so that JetStream delivers
// the message again and the inbox discards it.
func (d *demo) consumeTwice(ctx context.Context, out io.Writer, sub *outboxnats.Subscriber) error {
	t := d.text
	say := func(key string, args ...any) { fmt.Fprintf(out, t[key]+"\n", args...) }
	inbox := outbox.NewInbox(d.points)
	var mu sync.Mutex
	deliveries := 0
	done := make(chan struct{})
	subCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	handler := func(ctx context.Context, m outbox.Message) error {
		var ev transferred
		if err := json.Unmarshal(m.Payload, &ev); err != nil {
			return outbox.Permanent(err)
		}
		note := fmt.Sprintf(t["note"], ev.From, ev.To, ev.Amount)
		applied, err := inbox.Process(ctx, "points", m.MsgID, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO notes (msg_id, note) VALUES (?, ?)", m.MsgID, note)
			return err
		})
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		deliveries++
		if applied {
			say("effect", m.MsgID, note)
		} else {
			say("duplicate", m.MsgID)
		}
		if deliveries == 1 {
			say("acklost")
			return errors.New("demo: ack lost")
		}
		close(done)
		return nil
	}
	runErr := make(chan error, 1)
	go func() { runErr <- sub.Run(subCtx, handler) }()
	select {
	case <-done:
	case <-subCtx.Done():
	}
	stop()
	if err := <-runErr; err != nil {
		return fmt.Errorf("demo: subscriber: %w", err)
	}
	if deliveries < 2 {
		return errors.New("demo: JetStream did not deliver the message twice within 30s")
	}
	return nil
}

// streamSuffix returns 8 random hex digits, which name a demo run's streams.
func streamSuffix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

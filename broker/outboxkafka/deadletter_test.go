package outboxkafka_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxkafka"
)

// logBuffer keeps what a logger wrote, for a test to read while the
// subscriber goes on writing.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the lines logged so far that contain every one of words.
func (b *logBuffer) lines(words ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for l := range strings.Lines(b.buf.String()) {
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}

// deadLetterBundle is a one-partition topic, a subscriber of it whose
// handler fails every message with MsgID "poison" with failure and hands
// the others' ids to got, and what it logs.
type deadLetterBundle struct {
	url   string
	topic string
	cfg   outboxkafka.SubscriberConfig
	got   chan string
	log   *logBuffer
}

// setupDeadLetter creates the topic on the cluster at url (and its
// dead-letter topic first, with dltConfigs, when dltConfigs is not nil) and
// starts a subscriber with cfg's URL query and MaxMessageBytes.
func setupDeadLetter(t *testing.T, url, query string, maxBytes int, dltConfigs map[string]*string, failure error) *deadLetterBundle {
	t.Helper()
	b := &deadLetterBundle{url: url, topic: newTopic(t, url, 1), got: make(chan string, 10), log: &logBuffer{}}
	if dltConfigs != nil {
		createTopicWith(t, url, b.topic+".dlt", 1, dltConfigs)
	}
	logger := slog.New(slog.NewTextHandler(io.MultiWriter(b.log, t.Output()), &slog.HandlerOptions{Level: slog.LevelDebug}))
	b.cfg = outboxkafka.SubscriberConfig{URL: url + query, Group: b.topic, Topics: []string{b.topic},
		MaxDeliveries: 2, RetryBackoff: 10 * time.Millisecond, MaxMessageBytes: maxBytes, Logger: logger,
		RedeliveryDelay: 10 * time.Millisecond, DeadLetterAfter: time.Millisecond}
	sub := newSubscriber(t, b.cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(ctx, func(_ context.Context, m outbox.Message) error {
			if m.MsgID == "poison" {
				return failure
			}
			b.got <- m.MsgID
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return b
}

// waitNext waits for the message after the poison one to be handled.
func (b *deadLetterBundle) waitNext(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case id := <-b.got:
		if id != "next" {
			t.Fatalf("handled %q, want next", id)
		}
	case <-time.After(within):
		t.Fatalf("the message after the poison one was not handled within %s: its partition is stuck", within)
	}
}

// deadLetter returns the poison message from the dead-letter topic.
func (b *deadLetterBundle) deadLetter(t *testing.T) outboxkafka.DeadLetter {
	t.Helper()
	return b.deadLetters(t, 1)[0]
}

// deadLetters returns the n poison messages of the dead-letter topic.
func (b *deadLetterBundle) deadLetters(t *testing.T, n int) []outboxkafka.DeadLetter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dls, err := outboxkafka.DeadLetters(ctx, b.cfg)
	if err != nil {
		t.Fatalf("DeadLetters: %v", err)
	}
	ok := len(dls) == n
	for _, dl := range dls {
		ok = ok && dl.Message.MsgID == "poison"
	}
	if !ok {
		t.Fatalf("DeadLetters = %+v, want %d poison messages", dls, n)
	}
	return dls
}

func publish(t *testing.T, pub *outboxkafka.Publisher, msgs ...outbox.Message) {
	t.Helper()
	if errs := pub.Publish(context.Background(), msgs); errs != nil {
		t.Fatalf("Publish: %v", errs)
	}
}

// TestDeadLetterNearLimit: a record as large as MaxMessageBytes allows,
// which the handler keeps failing, reaches the dead-letter topic although
// its copy with the dead-letter headers would be over the limit, and the
// next record of its partition is handled.
func TestDeadLetterNearLimit(t *testing.T) {
	t.Parallel()
	const limit = 4096
	b := setupDeadLetter(t, brokerURL, "", limit, nil, errors.New("cannot handle"))
	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: brokerURL, MaxMessageBytes: limit})
	// The largest payload Publish accepts: one byte more is refused as
	// ErrTooLarge before it is sent.
	for n := limit; ; n-- {
		m := outbox.Message{MsgID: "poison", Topic: b.topic, Payload: json.RawMessage(`"` + strings.Repeat("x", n) + `"`)}
		errs := pub.Publish(context.Background(), []outbox.Message{m})
		if errs == nil {
			break
		}
		if !errors.Is(errs[0], outboxkafka.ErrTooLarge) {
			t.Fatalf("Publish: %v", errs[0])
		}
	}
	publish(t, pub, outbox.Message{MsgID: "next", Topic: b.topic, Payload: json.RawMessage(`1`)})
	b.waitNext(t, 10*time.Second)
	b.deadLetter(t)
}

// TestDeadLetterLongError: a handler error longer than MaxMessageBytes is
// cut (at a UTF-8 boundary) in the outbox-dlt-error header, and the other
// dead-letter headers stay.
func TestDeadLetterLongError(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 3000) // 6000 bytes
	b := setupDeadLetter(t, brokerURL, "", 4096, nil, outbox.Permanent(errors.New(long)))
	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: brokerURL})
	publish(t, pub,
		outbox.Message{MsgID: "poison", Topic: b.topic, Key: "k", Payload: json.RawMessage(`{"a":1}`)},
		outbox.Message{MsgID: "next", Topic: b.topic, Key: "k", Payload: json.RawMessage(`2`)})
	b.waitNext(t, 10*time.Second)
	dl := b.deadLetter(t)
	if !utf8.ValidString(dl.Err) || len(dl.Err) < 3000 || len(dl.Err) >= len(long) || !strings.HasPrefix(long, strings.TrimSuffix(dl.Err, "…")) {
		t.Errorf("Err is %d bytes (valid UTF-8: %v), want a prefix of the handler's error cut to fit", len(dl.Err), utf8.ValidString(dl.Err))
	}
	if dl.Group != b.topic || dl.Deliveries != 1 || dl.Topic != b.topic || dl.Offset != 0 || dl.Time.IsZero() {
		t.Errorf("dead letter %+v lost headers that fit", dl)
	}
}

// TestDeadLetterTopicLimit: a dead-letter topic whose max.message.bytes is
// lower than the copy with headers refuses it on the broker; a smaller copy
// goes there instead.
func TestDeadLetterTopicLimit(t *testing.T) {
	t.Parallel()
	limit := "2000"
	b := setupDeadLetter(t, brokerURL, "?compression=none", 0, map[string]*string{"max.message.bytes": &limit},
		outbox.Permanent(errors.New(strings.Repeat("bad ", 250))))
	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: brokerURL})
	publish(t, pub,
		outbox.Message{MsgID: "poison", Topic: b.topic, Payload: json.RawMessage(`"` + strings.Repeat("x", 1600) + `"`)},
		outbox.Message{MsgID: "next", Topic: b.topic, Payload: json.RawMessage(`2`)})
	b.waitNext(t, 10*time.Second)
	b.deadLetter(t)
}

// TestDeadLetterRefused: a dead-letter topic that refuses even the record
// as it came does not lose it: the partition waits, the refusal is logged at
// Error once (not at every retry) with the record's place and what to
// change, and once the topic's max.message.bytes is raised the record moves
// and the partition goes on.
func TestDeadLetterRefused(t *testing.T) {
	t.Parallel()
	limit := "1000"
	b := setupDeadLetter(t, brokerURL, "?compression=none", 0, map[string]*string{"max.message.bytes": &limit},
		outbox.Permanent(errors.New("cannot handle")))
	pub := newPublisher(t, outboxkafka.PublisherConfig{URL: brokerURL})
	publish(t, pub,
		outbox.Message{MsgID: "poison", Topic: b.topic, Payload: json.RawMessage(`"` + strings.Repeat("x", 1600) + `"`)},
		outbox.Message{MsgID: "next", Topic: b.topic, Payload: json.RawMessage(`2`)})
	select {
	case id := <-b.got:
		t.Fatalf("%s was handled while the record before it was neither handled nor dead-lettered", id)
	case <-time.After(2 * time.Second):
	}
	errs := b.log.lines("level=ERROR")
	if len(errs) != 1 {
		t.Fatalf("%d Error lines in 2s, want 1 (logged once, then at most once a minute):\n%s", len(errs), strings.Join(errs, ""))
	}
	for _, want := range []string{"max.message.bytes", "topic=" + b.topic, "partition=0", "offset=0", "dead_letter_topic=" + b.topic + ".dlt"} {
		if !strings.Contains(errs[0], want) {
			t.Errorf("the Error line does not say %q: %s", want, errs[0])
		}
	}

	raised := "100000"
	adm, ctx := admin(t, brokerURL)
	resps, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &raised}}, b.topic+".dlt")
	if err == nil {
		_, err = resps.On(b.topic+".dlt", nil)
	}
	if err != nil {
		t.Fatalf("raising the dead-letter topic's max.message.bytes: %v", err)
	}
	b.waitNext(t, 10*time.Second)
	if dl := b.deadLetter(t); dl.Err != "cannot handle" {
		// The raise may land between two rungs of one attempt: the full
		// copy refused before it, the smaller one accepted after it. Then
		// the log shows that attempt's full copy refused last.
		if !raisedMidAttempt(b.log) {
			t.Fatalf("after the raise the dead letter has Err %q, want the full copy", dl.Err)
		}
		t.Logf("the raise landed within an attempt; the dead letter is the smaller copy")
	}
	// Once the raise is in effect the full copy is what goes out.
	publish(t, pub,
		outbox.Message{MsgID: "poison", Topic: b.topic, Payload: json.RawMessage(`"` + strings.Repeat("y", 1600) + `"`)},
		outbox.Message{MsgID: "next", Topic: b.topic, Payload: json.RawMessage(`3`)})
	b.waitNext(t, 10*time.Second)
	dls := b.deadLetters(t, 2)
	if dl := dls[1]; dl.Err != "cannot handle" {
		t.Errorf("the poison message published after the raise has a dead letter with Err %q, want the full copy", dl.Err)
	}
}

// raisedMidAttempt reports whether the line before the first "moved to the
// dead-letter topic" line is a refusal of the largest copy, the one every
// attempt starts with.
var refusedBytes = regexp.MustCompile(`uncompressed_bytes=(\d+)`)

func raisedMidAttempt(log *logBuffer) bool {
	lines := log.lines("outboxkafka:")
	largest, last := 0, 0
	for _, l := range lines {
		if strings.Contains(l, "moved to the dead-letter topic") {
			return last > 0 && last == largest
		}
		m := refusedBytes.FindStringSubmatch(l)
		if m == nil || !strings.Contains(l, "trying a smaller one") {
			last = 0
			continue
		}
		n, _ := strconv.Atoi(m[1])
		largest, last = max(largest, n), n
	}
	return false
}

// TestDeadLetterTopicKeptForever: the dead-letter topic the subscriber
// creates keeps its records until they are deleted (retention.ms -1), not
// for the broker's default retention.
func TestDeadLetterTopicKeptForever(t *testing.T) {
	t.Parallel()
	b := setupDeadLetter(t, brokerURL, "", 0, nil, errors.New("cannot handle"))
	adm, ctx := admin(t, brokerURL)
	rcs, err := adm.DescribeTopicConfigs(ctx, b.topic+".dlt")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(b.topic+".dlt", nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe %s.dlt: %v %v", b.topic, err, rc.Err)
	}
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" {
			if c.Value == nil || *c.Value != "-1" {
				t.Fatalf("retention.ms of the dead-letter topic = %v, want -1", c.MaybeValue())
			}
			return
		}
	}
	t.Fatalf("the dead-letter topic has no retention.ms: %+v", rc.Configs)
}

package outboxnats

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-go/outbox"
)

// bareJetStream connects to the shared server without the adapter.
func bareJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	requireShared(t)
	nc, err := nats.Connect(sharedURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func newTestPublisher(t *testing.T, u string) *Publisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := NewPublisher(ctx, PublisherConfig{URL: u})
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestNewPublisherUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	start := time.Now()
	_, err = NewPublisher(context.Background(), PublisherConfig{URL: "nats://user:s3cret@127.0.0.1:" + strconv.Itoa(port), Timeout: time.Second})
	if !outbox.IsUnavailable(err) {
		t.Fatalf("NewPublisher with no server: %v, want outbox.Unavailable", err)
	}
	if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "\n") {
		t.Errorf("error shows the password or spans lines: %q", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("NewPublisher took %s", time.Since(start))
	}
}

// TestNewPublisherStreamNotCovering: an existing stream of that name over
// other subjects is a configuration error, said at start-up.
func TestNewPublisherStreamNotCovering(t *testing.T) {
	t.Parallel()
	js := bareJetStream(t)
	u, id := testURL(t, sharedURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S_" + id, Subjects: []string{id + "other.>"}}); err != nil {
		t.Fatal(err)
	}
	_, err := NewPublisher(ctx, PublisherConfig{URL: u})
	if err == nil || !strings.Contains(err.Error(), "do not cover "+id+".>") || outbox.IsUnavailable(err) {
		t.Fatalf("NewPublisher on a stream over other subjects: %v", err)
	}
}

// TestStreamRefusal: a message over the stream's max_msg_size is refused by
// the stream (a 4xx PubAck error) without failing its neighbours.
func TestStreamRefusal(t *testing.T) {
	t.Parallel()
	js := bareJetStream(t)
	u, id := testURL(t, sharedURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S_" + id, Subjects: []string{id + ".>"}, MaxMsgSize: 2048}); err != nil {
		t.Fatal(err)
	}
	p := newTestPublisher(t, u)
	msgs := []outbox.Message{
		{MsgID: "small-1", Topic: "t", Payload: json.RawMessage(`1`)},
		{MsgID: "big", Topic: "t", Payload: json.RawMessage(`"` + strings.Repeat("x", 4096) + `"`)},
		{MsgID: "small-2", Topic: "t", Payload: json.RawMessage(`2`)},
	}
	errs := p.Publish(ctx, msgs)
	if len(errs) != 3 || errs[0] != nil || errs[2] != nil {
		t.Fatalf("Publish: %v", errs)
	}
	if errs[1] == nil || outbox.IsUnavailable(errs[1]) || !strings.Contains(errs[1].Error(), "refused by stream") {
		t.Errorf("the big message: %v, want a refusal", errs[1])
	}
}

// TestHeldBack: a keyed message that fails before it is sent holds back the
// later messages of its key, and no others.
func TestHeldBack(t *testing.T) {
	t.Parallel()
	requireShared(t)
	u, _ := testURL(t, sharedURL())
	p := newTestPublisher(t, u)
	msgs := []outbox.Message{
		{MsgID: "a-1", Topic: "bad topic", Key: "a", Payload: json.RawMessage(`1`)},
		{MsgID: "b-1", Topic: "t", Key: "b", Payload: json.RawMessage(`2`)},
		{MsgID: "a-2", Topic: "t", Key: "a", Payload: json.RawMessage(`3`)},
	}
	errs := p.Publish(context.Background(), msgs)
	if len(errs) != 3 {
		t.Fatalf("Publish: %v", errs)
	}
	if errs[0] == nil || outbox.IsUnavailable(errs[0]) || !strings.Contains(errs[0].Error(), "not a valid") && !strings.Contains(errs[0].Error(), "whitespace") {
		t.Errorf("invalid topic: %v", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("other key: %v", errs[1])
	}
	if !errors.Is(errs[2], outbox.ErrHeldBack) {
		t.Errorf("same key after the failure: %v, want ErrHeldBack", errs[2])
	}
}

// TestWireFormat: the NATS message carries the CloudEvents NATS binding in
// binary mode and JetStream's dedup header.
func TestWireFormat(t *testing.T) {
	t.Parallel()
	js := bareJetStream(t)
	u, id := testURL(t, sharedURL())
	p := newTestPublisher(t, u)
	created := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	m := outbox.Message{
		MsgID: "order-42:OrderPaid", Topic: "order.paid", Key: "order-42", Payload: json.RawMessage(`{"n":1}`),
		Headers: map[string]string{"tenant": "t ü/1"}, CreatedAt: created,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if errs := p.Publish(ctx, []outbox.Message{m}); errs != nil {
		t.Fatal(errs)
	}
	s, err := js.Stream(ctx, "S_"+id)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.GetLastMsgForSubject(ctx, id+".order.paid")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ce-specversion": "1.0", "ce-id": "order-42:OrderPaid", "ce-type": "order.paid", "ce-source": "/outbox",
		"ce-time": "2026-01-02T03:04:05.000006Z", "ce-partitionkey": "order-42", "ce-tenant": "t%20%C3%BC/1",
		"content-type": "application/json", "Nats-Msg-Id": "order-42:OrderPaid",
	}
	for k, v := range want {
		if got := raw.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if string(raw.Data) != `{"n":1}` {
		t.Errorf("body %s", raw.Data)
	}
	back, err := decodeMessage(raw.Header, raw.Data)
	if err != nil || back.MsgID != m.MsgID || back.Key != m.Key || back.Headers["tenant"] != "t ü/1" || !back.CreatedAt.Equal(created) {
		t.Errorf("decoded %+v, %v", back, err)
	}
}

// TestControlCharactersInHeaders: a header value or msg_id with CR, LF, tab
// or NUL (a row inserted by SQL) travels percent-encoded, so it cannot break
// the header block, and comes back as it left.
func TestControlCharactersInHeaders(t *testing.T) {
	t.Parallel()
	js := bareJetStream(t)
	u, id := testURL(t, sharedURL())
	p := newTestPublisher(t, u)
	m := outbox.Message{
		MsgID: "a\r\nNats-Msg-Id: b", Topic: "order.paid", Key: "k\tey", Payload: json.RawMessage(`{}`),
		Headers: map[string]string{"tenant": "eu1\r\nX-Evil: 1\x00"},
	}
	next := outbox.Message{MsgID: "next", Topic: "order.paid", Payload: json.RawMessage(`{}`)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if errs := p.Publish(ctx, []outbox.Message{m, next}); errs != nil {
		t.Fatal(errs)
	}
	s, err := js.Stream(ctx, "S_"+id)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := raw.Header.Get("ce-tenant"); got != "eu1%0D%0AX-Evil:%201%00" {
		t.Errorf("ce-tenant = %q", got)
	}
	back, err := decodeMessage(raw.Header, raw.Data)
	if err != nil || back.MsgID != m.MsgID || back.Key != m.Key || back.Headers["tenant"] != m.Headers["tenant"] || len(back.Headers) != 1 {
		t.Errorf("decoded %+v, %v", back, err)
	}
}

// TestNotAnEvent: a message without CloudEvents headers goes straight to
// the dead-letter subject, with the reason.
func TestNotAnEvent(t *testing.T) {
	t.Parallel()
	js := bareJetStream(t)
	u, id := testURL(t, sharedURL())
	newTestPublisher(t, u) // creates the stream
	sub := newTestSubscriber(t, u, "raw", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, id+"."+suiteTopic, []byte("not json")); err != nil {
		t.Fatal(err)
	}
	var calls int
	var mu sync.Mutex
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(runCtx, func(context.Context, outbox.Message) error {
			mu.Lock()
			calls++
			mu.Unlock()
			return nil
		})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	s, err := js.Stream(ctx, "S_"+id+"_DEAD")
	if err != nil {
		t.Fatal(err)
	}
	for {
		raw, err := s.GetLastMsgForSubject(ctx, sub.DeadLetterSubject())
		if err == nil {
			if reason := decodeValue(raw.Header.Get(headerDeadReason)); !strings.Contains(reason, "no id attribute") {
				t.Errorf("dead-letter reason %q", reason)
			}
			if string(raw.Data) != "not json" || raw.Header.Get(headerDeadGroup) != "raw" {
				t.Errorf("dead letter %q, headers %v", raw.Data, raw.Header)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no dead letter: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 0 {
		t.Errorf("the handler saw a message that is not an event %d times", calls)
	}
}

// TestConsumerFilterMismatch: a group bound to one topic cannot silently
// switch to another.
func TestConsumerFilterMismatch(t *testing.T) {
	t.Parallel()
	requireShared(t)
	u, _ := testURL(t, sharedURL())
	newTestSubscriber(t, u, "g", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := NewSubscriber(ctx, SubscriberConfig{URL: u, Group: "g", Topic: "other.topic"})
	if err == nil || !strings.Contains(err.Error(), "exists with filter subject") {
		t.Fatalf("NewSubscriber with another topic: %v", err)
	}
}

func TestBaseline(t *testing.T) {
	t.Parallel()
	requireShared(t)
	u, id := testURL(t, sharedURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := baseline(ctx, u, "bench", 2000, 200, 500)
	if err != nil || d <= 0 {
		t.Fatalf("baseline: %s, %v", d, err)
	}
	t.Logf("baseline: 2000 messages of 200 bytes in %s (%.0f msgs/s)", d, 2000/d.Seconds())
	// The messages are the Publisher's: its CloudEvents headers, each
	// message with its own id, which is also its Nats-Msg-Id.
	nc, err := nats.Connect(sharedURL(), nats.Timeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	stream, err := js.Stream(ctx, "S_"+id)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil || info.State.Msgs != 2000 {
		t.Fatalf("the stream holds %+v, %v; want 2000 messages", info, err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, id+".bench")
	if err != nil {
		t.Fatal(err)
	}
	attrs := decodeHeader(last.Header)
	if attrs["type"] != "bench" || attrs["specversion"] != "1.0" || attrs["source"] != "/outbox" || attrs["time"] == "" ||
		attrs["datacontenttype"] != "application/json" || attrs["id"] == "" || last.Header.Get(headerMsgID) != attrs["id"] || len(last.Data) != 200 {
		t.Errorf("the last baseline message: %v, %d bytes", last.Header, len(last.Data))
	}
	if _, err := baseline(ctx, u, "bench", 0, 200, 500); err == nil {
		t.Error("baseline with n = 0: no error")
	}
}

// TestCredentialsInURL: user and password, or a token, travel in the URL;
// a wrong one is a start-up error that is not outbox.Unavailable and does
// not show the secret.
func TestCredentialsInURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args      []string
		good, bad string
	}{
		{[]string{"--user", "relay", "--pass", "s3cret-pw"}, "relay:s3cret-pw@", "relay:wr0ng-pw@"},
		{[]string{"--auth", "s3cret-token"}, "s3cret-token@", "wr0ng-token@"},
	} {
		srv := startPrivateServer(t, tc.args...)
		host := strings.TrimPrefix(srv.URL(), "nats://")
		u, _ := testURL(t, "nats://"+tc.good+host)
		newTestPublisher(t, u)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := NewPublisher(ctx, PublisherConfig{URL: "nats://" + tc.bad + host})
		cancel()
		t.Logf("wrong credentials: %v", err)
		if err == nil || outbox.IsUnavailable(err) {
			t.Errorf("%v: wrong credentials: %v, want a plain error", tc.args, err)
		} else if strings.Contains(err.Error(), "wr0ng") {
			t.Errorf("error shows the secret: %v", err)
		}
	}
}

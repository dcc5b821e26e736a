package outboxamqp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxamqp"
)

// A content header of exactly one frame (frame_max less the frame's 8 bytes)
// is published and confirmed; one byte more is refused as undeliverable
// without being sent, and the connection goes on. This pins the size the
// publisher computes to what RabbitMQ measures: an estimate too low would let
// the broker close the connection, one too high would refuse the first
// message.
func TestContentHeaderAtFrameLimit(t *testing.T) {
	ch := admin(t)
	exchange := name("outboxtest")
	topic := name("topic")
	ctx := context.Background()
	pub, err := outboxamqp.NewPublisher(ctx, outboxamqp.PublisherConfig{URL: brokerURL, Exchange: exchange})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	defer ch.ExchangeDelete(exchange, false, false)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, topic, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	const frameMax = 131072 // RabbitMQ's default, which the shared broker keeps
	msg := func(id string, extra int) outbox.Message {
		m := outbox.Message{MsgID: id, Topic: topic, Key: "k", Payload: []byte(`{"a":1}`),
			CreatedAt: time.Now(), Headers: map[string]string{"pad": ""}}
		m.Headers["pad"] = strings.Repeat("p", frameMax-8-outboxamqp.ContentHeaderSize(&m, "")+extra)
		return m
	}
	at, over := msg(name("at-limit"), 0), msg(name("over-limit"), 1)
	if n := outboxamqp.ContentHeaderSize(&at, ""); n != frameMax-8 {
		t.Fatalf("content header of %d bytes, want %d", n, frameMax-8)
	}
	errs := pub.Publish(ctx, []outbox.Message{at, over})
	if len(errs) != 2 || errs[0] != nil || !outbox.IsUndeliverable(errs[1]) {
		t.Fatalf("Publish = %v, want nil for the message at the limit and undeliverable for the one over it", errs)
	}
	if !strings.Contains(errs[1].Error(), "over the 131064 bytes a frame of this connection holds (the broker's frame_max is 131072)") {
		t.Errorf("error %q does not say the limit", errs[1])
	}
	next := outbox.Message{MsgID: name("next"), Topic: topic, Payload: []byte(`{}`)}
	if errs := pub.Publish(ctx, []outbox.Message{next}); errs != nil {
		t.Fatalf("the next Publish: %v", errs)
	}
	for _, want := range []string{at.MsgID, next.MsgID} {
		d, ok, err := ch.Get(q.Name, true)
		if err != nil || !ok || d.MessageId != want {
			t.Fatalf("Get = %q, %v, %v; want %q", d.MessageId, ok, err, want)
		}
	}
}

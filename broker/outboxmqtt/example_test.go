package outboxmqtt_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/broker/outboxmqtt"
)

// A consumer group is made before anything is published, then a message goes
// through the broker (mosquitto on 127.0.0.1:1883) to the group's handler.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := "example.order.paid." + randomHex() // a topic of this run's own

	sub, err := outboxmqtt.NewSubscriber(ctx, outboxmqtt.SubscriberConfig{
		URL:   "mqtt://127.0.0.1:1883",
		Group: "billing",
		Name:  "example-" + randomHex(),
		Topic: topic,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sub.Leave(context.Background()) //nolint:errcheck // a demo member leaves its group
	defer sub.Close()

	pub, err := outboxmqtt.NewPublisher(ctx, outboxmqtt.PublisherConfig{URL: "mqtt://127.0.0.1:1883"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
	errs := pub.Publish(ctx, []outbox.Message{{
		MsgID:     "order-42:OrderPaid",
		Topic:     topic,
		Key:       "order-42",
		Payload:   json.RawMessage(`{"order":42,"amount":"19.90"}`),
		Headers:   map[string]string{"tenant": "acme"},
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}})
	fmt.Println("acked:", errs == nil)

	runCtx, stop := context.WithCancel(ctx)
	err = sub.Run(runCtx, func(_ context.Context, m outbox.Message) error {
		fmt.Println("id:", m.MsgID)
		fmt.Println("key:", m.Key)
		fmt.Println("time:", m.CreatedAt)
		fmt.Println("headers:", m.Headers)
		fmt.Println("payload:", string(m.Payload))
		stop() // one message is enough for the example
		return nil
	})
	fmt.Println("run:", err)
	// Output:
	// acked: true
	// id: order-42:OrderPaid
	// key: order-42
	// time: 2024-05-06 07:08:09 +0000 UTC
	// headers: map[tenant:acme]
	// payload: {"order":42,"amount":"19.90"}
	// run: <nil>
}

func ExampleNewPublisher_qos0() {
	_, err := outboxmqtt.NewPublisher(context.Background(), outboxmqtt.PublisherConfig{URL: "mqtt://localhost:1883?qos=0"})
	fmt.Println(err)
	// Output:
	// outboxmqtt: QoS 0 is not supported: it has no acknowledgement, so the relay could not know that the broker got the message; use qos=1 (or 2)
}

func ExampleNewSubscriber_invalidGroup() {
	_, err := outboxmqtt.NewSubscriber(context.Background(), outboxmqtt.SubscriberConfig{
		URL: "mqtt://localhost:1883", Group: "billing/eu", Topic: "order.paid",
	})
	fmt.Println(err)
	// Output:
	// outboxmqtt: SubscriberConfig.Group "billing/eu" is not a valid share name; use 1 to 64 characters without "/", "+", "#"
}

func randomHex() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// A publisher whose autopaho configuration the caller adjusts: a password
// read when the connection manager is made, and a standby broker to fail
// over to. The adapter keeps its client id, session and acks.
func ExamplePublisherConfig_clientConfig() {
	standby, _ := url.Parse("mqtt://127.0.0.1:1884")
	cfg := outboxmqtt.PublisherConfig{
		URL: "mqtt://127.0.0.1:1883",
		ClientConfig: func(c *autopaho.ClientConfig) {
			c.ServerUrls = append(c.ServerUrls, standby)
			c.ConnectUsername, c.ConnectPassword = "relay", []byte(os.Getenv("MQTT_PASSWORD"))
		},
	}
	pub, err := outboxmqtt.NewPublisher(context.Background(), cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()
}

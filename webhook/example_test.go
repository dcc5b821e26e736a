package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/webhook"
)

func Example() {
	const secret = "shared-secret"

	// A receiver: it checks the signature (Standard Webhooks) over the raw
	// body, then would deduplicate by ce-id before acting on the event.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify([]string{secret}, r.Header, body, webhook.DefaultTolerance); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Println("ce-id:", r.Header.Get("ce-id"))
		fmt.Println("ce-type:", r.Header.Get("ce-type"))
		fmt.Println("ce-time:", r.Header.Get("ce-time"))
		fmt.Println("ce-partitionkey:", r.Header.Get("ce-partitionkey"))
		fmt.Println("body:", string(body))
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()

	pub, err := webhook.New(webhook.Config{URL: srv.URL + "/events", Secret: secret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pub.Close()

	errs := pub.Publish(context.Background(), []outbox.Message{{
		MsgID:     "order-42:OrderPaid",
		Topic:     "order.paid",
		Key:       "order-42",
		Payload:   json.RawMessage(`{"order":42,"amount":"19.90"}`),
		CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}})
	fmt.Println("acked:", errs == nil)
	// Output:
	// ce-id: order-42:OrderPaid
	// ce-type: order.paid
	// ce-time: 2024-05-06T07:08:09Z
	// ce-partitionkey: order-42
	// body: {"order":42,"amount":"19.90"}
	// acked: true
}

func ExampleNew_invalid() {
	_, err := webhook.New(webhook.Config{URL: "ftp://example.com/in"})
	fmt.Println(err)
	// Output:
	// webhook: Config.URL "ftp://example.com/in" has scheme "ftp"; only http and https are supported
}

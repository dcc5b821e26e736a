package outboxsqlite_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/admin"
)

// The admin handler serves the table's counts and DEAD messages as JSON, and
// with Writable moves a DEAD message back to NEW for the relay to publish
// again. Mount it behind your own authentication, or give it a Token.
func Example_adminHandler() {
	ctx := context.Background()
	db, drv, cleanup := openTempOutbox(ctx)
	defer cleanup()
	commitMessages(ctx, db, drv,
		outbox.Message{MsgID: "order-1:OrderPaid", Topic: "order.paid", Payload: json.RawMessage(`{"order":1}`)},
		outbox.Message{MsgID: "order-2:OrderPaid", Topic: "order.paid", Payload: json.RawMessage(`{"order":2}`)},
	)
	// The broker refuses one message; with MaxRetries 1 it is DEAD at once.
	pub := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		if m.MsgID == "order-2:OrderPaid" {
			return errors.New("rejected: schema mismatch")
		}
		return nil
	})
	relay, err := outbox.NewRelay(drv, pub, outbox.RelayConfig{MaxRetries: 1, RetryBudget: -1})
	if err != nil {
		panic(err)
	}
	if _, err := relay.RunOnce(ctx); err != nil {
		panic(err)
	}

	h, err := admin.NewHandler(admin.Config{Store: drv, Writable: true, Token: "s3cret"})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/", http.StripPrefix("/admin", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	call := func(method, path, body string) {
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		req.Header.Set("Authorization", "Bearer s3cret")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		fmt.Printf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	var st admin.Stats
	if err := getJSON(ctx, srv.URL+"/admin/stats", &st); err != nil {
		panic(err)
	}
	fmt.Printf("pending=%d sent=%d dead=%d\n", st.Pending, st.Sent, st.Dead)
	var dead admin.MessageList
	if err := getJSON(ctx, srv.URL+"/admin/messages?status=dead", &dead); err != nil {
		panic(err)
	}
	for _, m := range dead.Messages {
		fmt.Printf("DEAD %s retries=%d last_error=%q\n", m.MsgID, m.Retries, m.LastError)
	}
	call("POST", "/admin/dead/retry", `{"msg_ids":["order-2:OrderPaid"]}`)
	call("POST", "/admin/dead/drop", `{"all":true}`)

	// Output:
	// pending=0 sent=1 dead=1
	// DEAD order-2:OrderPaid retries=1 last_error="rejected: schema mismatch"
	// POST /admin/dead/retry: 200 {"retried":1}
	// POST /admin/dead/drop: 400 {"error":"\"all\": true deletes every DEAD message; add \"yes\": true to confirm (see them first with GET /messages?status=dead)"}
}

// getJSON gets url with the example's token and decodes the answer into v.
func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

package drivertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/admin"
	"github.com/outbox-go/outbox/outboxdriver"
)

// testAdminHTTP runs the admin handler against the real store: every route,
// with the rows it reads and changes checked in the table.
func (s suite[TTx]) testAdminHTTP(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.adminHTTPRows(t, ctx, env)
	call := adminClient(t, ctx, env.Driver)
	s.checkAdminHTTPReads(t, env, call)
	checkAdminHTTPLists(t, call)
	s.checkAdminHTTPRetry(t, ctx, env, call)
	s.checkAdminHTTPDrop(t, env, call)
}

// adminCall makes one request of the admin handler and returns its status
// code; a 2xx body is decoded into out unless out is nil.
type adminCall func(method, path, body string, out any) int

// adminHTTPRows writes the rows of testAdminHTTP: four DEAD in orders and
// payments, one SENT and one NEW.
func (s suite[TTx]) adminHTTPRows(t *testing.T, ctx context.Context, env *Env[TTx]) {
	s.write(t, env,
		outbox.Message{MsgID: "order/1", Topic: "orders", Key: "k", Payload: json.RawMessage(`{"n":1}`), Headers: map[string]string{"tenant": "t1"}},
		outbox.Message{MsgID: "order/2", Topic: "orders", Payload: json.RawMessage(`{"n":2}`)},
		outbox.Message{MsgID: "pay-1", Topic: "payments", Payload: json.RawMessage(`{"n":3}`)},
		outbox.Message{MsgID: "pay-2", Topic: "payments", Payload: json.RawMessage(`{"n":4}`)},
		outbox.Message{MsgID: "ok-1", Topic: "orders", Payload: json.RawMessage(`{"n":5}`)})
	refuse := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		if m.MsgID != "ok-1" {
			return errors.New("refused by the broker")
		}
		return nil
	})
	if _, err := newRelay(t, env.Driver, refuse, outbox.RelayConfig{MaxRetries: 1}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	s.write(t, env, outbox.Message{MsgID: "new-1", Topic: "orders", Payload: json.RawMessage(`{}`)})
}

// adminClient serves a writable admin handler on store until t ends and
// returns the caller of its routes, with the handler's token.
func adminClient(t *testing.T, ctx context.Context, store outboxdriver.Store) adminCall {
	const token = "t0ken"
	h, err := admin.NewHandler(admin.Config{Store: store, Writable: true, Token: token, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.StripPrefix("/admin", h))
	t.Cleanup(srv.Close)
	return func(method, path, body string, out any) int {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+"/admin"+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if out != nil && resp.StatusCode < 300 {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(out); err != nil {
				t.Fatalf("%s %s: %v in %s", method, path, err, raw)
			}
		}
		return resp.StatusCode
	}
}

// checkAdminHTTPReads checks GET /stats and, where the store reads a
// backlog, GET /backlog.
func (s suite[TTx]) checkAdminHTTPReads(t *testing.T, env *Env[TTx], call adminCall) {
	var st admin.Stats
	if code := call("GET", "/stats", "", &st); code != 200 || st.Pending != 1 || !st.SentEstimated || st.Sent < 1 || st.Dead != 4 || len(st.Topics) != 2 ||
		st.Topics[0] != (admin.TopicStats{Topic: "orders", Pending: 1, Dead: 2, OldestPendingAgeSeconds: st.Topics[0].OldestPendingAgeSeconds}) ||
		st.Table != env.Driver.Tables().Outbox {
		t.Fatalf("GET /stats: %d %+v", code, st)
	}
	if _, ok := env.Driver.(outboxdriver.BacklogReader); ok {
		var b admin.Backlog
		if code := call("GET", "/backlog", "", &b); code != 200 || b.Pending != 1 || b.Dead == nil || *b.Dead != 4 {
			t.Fatalf("GET /backlog: %d %+v", code, b)
		}
	}
}

// checkAdminHTTPLists checks GET /messages, its paging and filters, and GET
// of one message by its escaped msg_id.
func checkAdminHTTPLists(t *testing.T, call adminCall) {
	// The DEAD list, a page at a time.
	var page admin.MessageList
	if code := call("GET", "/messages?limit=3", "", &page); code != 200 || len(page.Messages) != 3 || page.NextAfterID == nil {
		t.Fatalf("GET /messages: %d %+v", code, page)
	}
	if m := page.Messages[0]; m.MsgID != "order/1" || m.Status != "DEAD" || m.LastError != "refused by the broker" ||
		m.Retries != 1 || m.DeadAt == nil || m.Payload != nil || m.Key != "k" {
		t.Fatalf("first DEAD message: %+v", m)
	}
	var rest admin.MessageList
	if code := call("GET", "/messages?limit=3&after_id="+jsonInt(*page.NextAfterID), "", &rest); code != 200 ||
		len(rest.Messages) != 1 || rest.Messages[0].MsgID != "pay-2" || rest.NextAfterID != nil {
		t.Fatalf("second page: %d %+v", code, rest)
	}
	var news admin.MessageList
	if code := call("GET", "/messages?status=new&topic=orders", "", &news); code != 200 || len(news.Messages) != 1 || news.Messages[0].MsgID != "new-1" {
		t.Fatalf("NEW messages of orders: %d %+v", code, news)
	}

	// One message, with its payload and headers; a "/" in the msg_id travels escaped.
	var one admin.Message
	if code := call("GET", "/messages/"+url.PathEscape("order/1"), "", &one); code != 200 || one.MsgID != "order/1" ||
		string(one.Payload) != `{"n":1}` || one.Headers["tenant"] != "t1" || one.Topic != "orders" {
		t.Fatalf("GET /messages/order%%2F1: %d %+v", code, one)
	}
	if code := call("GET", "/messages/nobody", "", nil); code != 404 {
		t.Fatalf("an unknown msg_id: %d", code)
	}
}

// checkAdminHTTPRetry checks POST /dead/retry by msg_id: only the DEAD
// message moves, and its row records the retry.
func (s suite[TTx]) checkAdminHTTPRetry(t *testing.T, ctx context.Context, env *Env[TTx], call adminCall) {
	// Retry by msg_id: only the DEAD one moves; the retry is recorded.
	var changed admin.Changed
	if code := call("POST", "/dead/retry", `{"msg_ids":["order/1","ok-1","nobody"]}`, &changed); code != 200 ||
		changed.Retried == nil || *changed.Retried != 1 || changed.Unmatched != 2 {
		t.Fatalf("retry: %d %+v", code, changed)
	}
	m, err := env.Driver.GetMessage(ctx, "order/1")
	if err != nil || m.Status != outbox.StatusNew || m.Retries != 0 ||
		!strings.Contains(m.LastError, "via the admin handler") || !strings.Contains(m.LastError, "refused by the broker") {
		t.Fatalf("after the retry: %+v, %v", m, err)
	}
	if m, _ := env.Driver.GetMessage(ctx, "ok-1"); m.Status != outbox.StatusSent {
		t.Fatalf("a retry moved a SENT message to %v", m.Status)
	}
}

// checkAdminHTTPDrop checks POST /dead/drop of a topic's DEAD rows, refused
// without "yes".
func (s suite[TTx]) checkAdminHTTPDrop(t *testing.T, env *Env[TTx], call adminCall) {
	// Drop: "all" needs "yes"; with it, only the topic's DEAD rows go.
	if code := call("POST", "/dead/drop", `{"all":true,"topic":"payments"}`, nil); code != 400 {
		t.Fatalf("drop all without yes: %d", code)
	}
	if got := s.count(t, env, "status = 2"); got != 3 {
		t.Fatalf("%d DEAD rows after a refused drop, want 3", got)
	}
	var changed admin.Changed
	if code := call("POST", "/dead/drop", `{"all":true,"topic":"payments","yes":true}`, &changed); code != 200 ||
		changed.Dropped == nil || *changed.Dropped != 2 {
		t.Fatalf("drop payments: %d %+v", code, changed)
	}
	if got := s.count(t, env, "1 = 1"); got != 4 {
		t.Fatalf("%d rows left, want 4 (order/1 NEW again, order/2 DEAD, ok-1 SENT, new-1 NEW)", got)
	}
	if got := s.count(t, env, "status = 2"); got != 1 {
		t.Fatalf("%d DEAD rows left, want 1", got)
	}
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

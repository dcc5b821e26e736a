package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// fakeStore is an outbox table of DEAD messages in memory, for the
// handler's logic; the SQL behind the same calls is tested on the real
// databases by drivertest's DeadSearch.
type fakeStore struct {
	outboxdriver.Store // the calls the console does not make
	mu                 sync.Mutex
	msgs               []outbox.Message
	queries            []outboxdriver.DeadQuery
	countLimits        []int
}

func newFake(n int) *fakeStore {
	f := &fakeStore{}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range n {
		f.msgs = append(f.msgs, outbox.Message{ID: int64(i + 1), MsgID: fmt.Sprintf("m-%d", i+1), Topic: []string{"a", "b"}[i%2],
			Status: outbox.StatusDead, LastError: fmt.Sprintf("broker refused m-%d after %d tries", i+1, i), DeadAt: at.Add(time.Duration(i) * time.Second),
			Payload: json.RawMessage(`{"secret":"payload"}`)})
	}
	return f
}

func (f *fakeStore) Dialect() string       { return "fake" }
func (f *fakeStore) Tables() outbox.Tables { return outbox.Tables{Outbox: "outbox"} }

func (f *fakeStore) match(m outbox.Message, q outboxdriver.DeadQuery) bool {
	return m.Status == outbox.StatusDead && (q.MsgID == "" || m.MsgID == q.MsgID) && (q.Topic == "" || m.Topic == q.Topic) &&
		(q.ErrorContains == "" || strings.Contains(strings.ToLower(m.LastError), strings.ToLower(q.ErrorContains))) &&
		(q.MaxID == 0 || m.ID <= q.MaxID) && (q.DeadUntil.IsZero() || !m.DeadAt.After(q.DeadUntil))
}

func (f *fakeStore) SearchDead(_ context.Context, q outboxdriver.DeadQuery) ([]outbox.Message, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, q)
	var out []outbox.Message
	scanned, last := 0, int64(0)
	for _, m := range f.msgs {
		if m.ID <= q.AfterID || m.Status != outbox.StatusDead {
			continue
		}
		if scanned == q.Scan {
			break
		}
		scanned++
		last = m.ID
		if f.match(m, q) {
			m.Payload = nil
			out = append(out, m)
			if len(out) == q.Limit {
				return out, m.ID, nil
			}
		}
	}
	if scanned == q.Scan {
		return out, last, nil
	}
	return out, 0, nil
}

func (f *fakeStore) CountDead(_ context.Context, q outboxdriver.DeadQuery, limit int) (outboxdriver.DeadCount, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.countLimits = append(f.countLimits, limit)
	var c outboxdriver.DeadCount
	for _, m := range f.msgs {
		if f.match(m, q) && c.Count <= int64(limit) {
			c.Count++
			c.MaxID = m.ID
			c.LastDeadAt = m.DeadAt
		}
	}
	return c, nil
}

func (f *fakeStore) TopicBacklog(context.Context) ([]outboxdriver.TopicBacklog, int64, error) {
	return []outboxdriver.TopicBacklog{{Topic: "a", Pending: 3, OldestPendingAge: time.Second}}, int64(len(f.msgs)), nil
}

func (f *fakeStore) GetMessage(_ context.Context, id string) (outbox.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.msgs {
		if m.MsgID == id {
			return m, nil
		}
	}
	return outbox.Message{}, outbox.ErrNotFound
}

func (f *fakeStore) change(ids []string, fn func(*outbox.Message)) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for i := range f.msgs {
		for _, id := range ids {
			if f.msgs[i].MsgID == id && f.msgs[i].Status == outbox.StatusDead {
				fn(&f.msgs[i])
				n++
			}
		}
	}
	return n
}

func (f *fakeStore) RetryDead(_ context.Context, d outbox.DeadFilter, note string) (int64, error) {
	return f.change(d.MsgIDs, func(m *outbox.Message) { m.Status, m.LastError = outbox.StatusNew, note+m.LastError }), nil
}

func (f *fakeStore) DropDead(_ context.Context, d outbox.DeadFilter) (int64, error) {
	return f.change(d.MsgIDs, func(m *outbox.Message) { m.Status = outbox.StatusSent }), nil
}

const secret = "0123456789abcdef-secret"

type harness struct {
	t    *testing.T
	c    *Console
	st   *fakeStore
	log  *strings.Builder
	jar  []*http.Cookie
	csrf string
}

func newHarness(t *testing.T, n int, mod func(*Config)) *harness {
	t.Helper()
	st := newFake(n)
	var log strings.Builder
	cfg := Config{Store: st, Writable: true, Tokens: []Token{{Name: "alice", Secret: secret}},
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &log}, nil))}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, c: c, st: st, log: &log}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// do sends a request with the harness's cookies; headers are name, value pairs.
func (h *harness) do(method, path, body string, headers ...string) (int, string, http.Header) {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, "http://console.test"+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, ck := range h.jar {
		req.AddCookie(ck)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.c.ServeHTTP(rec, req)
	if cks := rec.Result().Cookies(); len(cks) > 0 {
		h.jar = cks
	}
	return rec.Code, rec.Body.String(), rec.Header()
}

func (h *harness) login() {
	h.t.Helper()
	code, body, _ := h.do("POST", "/api/login", `{"token":"`+secret+`"}`, "Origin", "http://console.test")
	if code != 200 {
		h.t.Fatalf("login: %d %s", code, body)
	}
	var s sessionInfo
	if err := json.Unmarshal([]byte(body), &s); err != nil || s.CSRF == "" || s.User != "alice" {
		h.t.Fatalf("login answered %s (%v)", body, err)
	}
	h.csrf = s.CSRF
}

func (h *harness) post(path, body string) (int, string) {
	h.t.Helper()
	code, out, _ := h.do("POST", path, body, "Origin", "http://console.test", "X-CSRF-Token", h.csrf)
	return code, out
}

func TestNewRefusesNoAuthentication(t *testing.T) {
	for _, cfg := range []Config{
		{Store: newFake(0)},
		{Store: newFake(0), Tokens: []Token{{Name: "a", Secret: "short"}}},
		{Store: newFake(0), Tokens: []Token{{Secret: secret}}},
		{Tokens: []Token{{Name: "a", Secret: secret}}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) took it", cfg)
		}
	}
}

func TestConfigWithDefaults(t *testing.T) {
	got := (Config{}).WithDefaults()
	if got.Timeout != 10*time.Second || got.SampleEvery != 5*time.Second || got.SessionTTL != 12*time.Hour ||
		got.MaxInFlight != 2 || got.Samples != 720 || got.Logger == nil {
		t.Errorf("defaults: %+v", got)
	}
	if _, err := New(Config{Store: newFake(0), Unauthenticated: true, Samples: -1}); err == nil {
		t.Error("a negative Samples was taken")
	}
}

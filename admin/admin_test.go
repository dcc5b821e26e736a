package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// fakeStore answers the admin calls from memory, for the handler's own
// logic: request checks, status codes, paging. drivertest's AdminHTTP runs
// the handler against every real database.
type fakeStore struct {
	outboxdriver.Store // nil: a call the handler should not make panics
	msgs               []outbox.Message
	err                error
	lastFilter         outbox.ListFilter
	lastDead           outbox.DeadFilter
	lastNote           string
}

func (f *fakeStore) Tables() outbox.Tables { return outbox.Tables{}.WithDefaults() }

func (f *fakeStore) Stats(context.Context) (outbox.Stats, error) {
	return outbox.Stats{Pending: 1, Dead: 2, Topics: []outbox.TopicStats{{Topic: "t", Pending: 1, Dead: 2}}}, f.err
}

func (f *fakeStore) ListMessages(_ context.Context, lf outbox.ListFilter) ([]outbox.Message, error) {
	f.lastFilter = lf
	var out []outbox.Message
	for _, m := range f.msgs {
		if m.ID > lf.AfterID && len(out) < lf.Limit {
			out = append(out, m)
		}
	}
	return out, f.err
}

func (f *fakeStore) GetMessage(_ context.Context, id string) (outbox.Message, error) {
	for _, m := range f.msgs {
		if m.MsgID == id {
			return m, f.err
		}
	}
	return outbox.Message{}, outbox.ErrNotFound
}

func (f *fakeStore) RetryDead(_ context.Context, df outbox.DeadFilter, note string) (int64, error) {
	f.lastDead, f.lastNote = df, note
	return 1, f.err
}

func (f *fakeStore) DropDead(_ context.Context, df outbox.DeadFilter) (int64, error) {
	f.lastDead = df
	return 1, f.err
}

func newTestHandler(t *testing.T, st outboxdriver.Store, cfg Config) http.Handler {
	t.Helper()
	cfg.Store = st
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// do sends a request and returns the status and the body; every answer,
// success or not, must be JSON.
func do(t *testing.T, h http.Handler, method, target, body string, hdr ...string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if method != http.MethodHead {
		if ct := rec.Header().Get("Content-Type"); ct != "application/json; charset=utf-8" {
			t.Errorf("%s %s: Content-Type %q", method, target, ct)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Errorf("%s %s: body is not JSON: %q", method, target, rec.Body.String())
		}
	}
	return rec.Code, rec.Body.String()
}

func TestNewHandlerConfig(t *testing.T) {
	if _, err := NewHandler(Config{}); err == nil || !strings.Contains(err.Error(), "Store") {
		t.Fatalf("no store: %v", err)
	}
	if _, err := NewHandler(Config{Store: &fakeStore{}, Timeout: -time.Second}); err == nil {
		t.Fatal("a negative timeout was taken")
	}
	if _, err := NewHandler(Config{Store: &fakeStore{}, MaxInFlight: -1}); err == nil {
		t.Fatal("a negative MaxInFlight was taken")
	}
	if got := (Config{}).WithDefaults(); got.Timeout != 10*time.Second || got.MaxInFlight != 2 || got.Logger == nil {
		t.Errorf("defaults: %+v", got)
	}
	if got := (Config{Timeout: time.Second, MaxInFlight: 5}).WithDefaults(); got.Timeout != time.Second || got.MaxInFlight != 5 {
		t.Errorf("WithDefaults changed set fields: %+v", got)
	}
}

func TestToken(t *testing.T) {
	h := newTestHandler(t, &fakeStore{}, Config{Token: "s3cret"})
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer s3cre", "Bearer s3cret2", "Basic s3cret", "Bearer  s3cret"} {
		if code, body := do(t, h, "GET", "/stats", "", "Authorization", auth); code != http.StatusUnauthorized || !strings.Contains(body, "token") {
			t.Errorf("Authorization %q: %d %s", auth, code, body)
		}
	}
	for _, auth := range []string{"Bearer s3cret", "bearer s3cret", "BEARER s3cret"} {
		if code, body := do(t, h, "GET", "/stats", "", "Authorization", auth); code != http.StatusOK {
			t.Fatalf("Authorization %q: %d %s", auth, code, body)
		}
	}
}

func TestReadOnly(t *testing.T) {
	st := &fakeStore{}
	h := newTestHandler(t, st, Config{})
	for _, path := range []string{"/dead/retry", "/dead/drop"} {
		if code, body := do(t, h, "POST", path, `{"msg_ids":["a"]}`); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("POST %s on a read-only handler: %d %s", path, code, body)
		}
	}
	if st.lastDead.MsgIDs != nil {
		t.Fatal("a read-only handler called the store")
	}
}

func TestRoutesAndMethods(t *testing.T) {
	h := newTestHandler(t, &fakeStore{}, Config{Writable: true})
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/stats", 200},
		{"HEAD", "/stats", 200},
		{"POST", "/stats", 405},
		{"GET", "/dead/retry", 405},
		{"DELETE", "/messages/x", 405},
		{"GET", "/nope", 404},
		{"GET", "/stats?x=1", 400},
		{"GET", "/backlog", 501}, // the fake store reads no backlog
	} {
		code, body := do(t, h, c.method, c.path, "")
		if code != c.code {
			t.Errorf("%s %s: %d, want %d (%s)", c.method, c.path, code, c.code, body)
		}
	}
	req := httptest.NewRequest("PUT", "/dead/drop", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Header().Get("Allow") != "POST" {
		t.Fatalf("405 without Allow: %v", rec.Header())
	}
}

func TestList(t *testing.T) {
	st := &fakeStore{}
	for i := range 5 {
		st.msgs = append(st.msgs, outbox.Message{ID: int64(i + 1), MsgID: "m" + string(rune('a'+i)), Topic: "t",
			Status: outbox.StatusDead, Payload: json.RawMessage(`{"big":true}`)})
	}
	h := newTestHandler(t, st, Config{})
	code, body := do(t, h, "GET", "/messages?limit=2&topic=t&status=DEAD", "")
	var page MessageList
	if err := json.Unmarshal([]byte(body), &page); err != nil || code != 200 {
		t.Fatalf("%d %s %v", code, body, err)
	}
	if len(page.Messages) != 2 || page.NextAfterID == nil || *page.NextAfterID != 2 || page.Messages[0].Payload != nil {
		t.Fatalf("first page: %s", body)
	}
	if st.lastFilter != (outbox.ListFilter{Status: outbox.StatusDead, Topic: "t", Limit: 2}) {
		t.Fatalf("filter %+v", st.lastFilter)
	}
	_, body = do(t, h, "GET", "/messages?limit=2&after_id=4", "")
	page = MessageList{}
	if err := json.Unmarshal([]byte(body), &page); err != nil || len(page.Messages) != 1 || page.NextAfterID != nil {
		t.Fatalf("last page: %s", body)
	}
	if _, body = do(t, h, "GET", "/messages?status=new", ""); st.lastFilter.Status != outbox.StatusNew || st.lastFilter.Limit != DefaultListLimit {
		t.Fatalf("status=new: %+v %s", st.lastFilter, body)
	}
	for _, q := range []string{"status=gone", "limit=0", "limit=10001", "limit=x", "after_id=-1", "after_id=x",
		"statsu=dead", "topic=a&topic=b"} {
		if code, body := do(t, h, "GET", "/messages?"+q, ""); code != 400 || !strings.Contains(body, "error") {
			t.Errorf("?%s: %d %s", q, code, body)
		}
	}
}

func TestShow(t *testing.T) {
	st := &fakeStore{msgs: []outbox.Message{
		{ID: 1, MsgID: "order/42", Topic: "t", Payload: json.RawMessage(`{"a":1}`), Headers: map[string]string{"h": "v"}},
		{ID: 2, MsgID: "raw", Topic: "t", Payload: json.RawMessage(`not json`)},
	}}
	h := newTestHandler(t, st, Config{})
	code, body := do(t, h, "GET", "/messages/order%2F42", "")
	var m Message
	if err := json.Unmarshal([]byte(body), &m); err != nil || code != 200 || m.MsgID != "order/42" ||
		string(m.Payload) != `{"a":1}` || m.Headers["h"] != "v" || m.Status != "NEW" {
		t.Fatalf("%d %s", code, body)
	}
	if _, body := do(t, h, "GET", "/messages/raw", ""); !strings.Contains(body, `"payload":"not json"`) {
		t.Fatalf("a payload that is not JSON: %s", body)
	}
	if code, body := do(t, h, "GET", "/messages/none", ""); code != 404 || !strings.Contains(body, `none`) {
		t.Fatalf("unknown: %d %s", code, body)
	}
}

func TestSelection(t *testing.T) {
	st := &fakeStore{}
	h := newTestHandler(t, st, Config{Writable: true})
	for _, c := range []struct{ path, body, want string }{
		{"/dead/retry", `{}`, "give the msg_ids"},
		{"/dead/retry", `{"msg_ids":["a"],"all":true}`, "not both"},
		{"/dead/retry", `{"msgids":["a"]}`, "unknown field"},
		{"/dead/retry", `{"msg_ids":["a"]} {"all":true}`, "more than one"},
		{"/dead/retry", `{"msg_ids":[""]}`, "empty msg_id"},
		{"/dead/retry", `[1]`, "not a selection"},
		{"/dead/drop", `{"all":true,"topic":"t"}`, `yes`},
		{"/dead/drop", `{"msg_ids":` + strings.Repeat(`["x"],`, 0) + `[` + strings.TrimSuffix(strings.Repeat(`"x",`, MaxSelection+1), ",") + `]}`, "send them in parts"},
	} {
		code, body := do(t, h, "POST", c.path, c.body)
		if code != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Errorf("POST %s %.60s: %d %s", c.path, c.body, code, body)
		}
	}
	if st.lastDead.MsgIDs != nil || st.lastDead.All {
		t.Fatalf("a refused request reached the store: %+v", st.lastDead)
	}
	// A body that is not JSON by its Content-Type, as a form a browser sends.
	req := httptest.NewRequest("POST", "/dead/drop", strings.NewReader(`{"all":true,"yes":true}`))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnsupportedMediaType || st.lastDead.All {
		t.Fatalf("a form body: %d %s", rec.Code, rec.Body)
	}

	code, body := do(t, h, "POST", "/dead/retry", `{"msg_ids":["a","b","c"],"topic":"t"}`)
	if code != 200 || body != `{"retried":1,"unmatched":2}`+"\n" {
		t.Fatalf("retry: %d %s", code, body)
	}
	if st.lastDead.Topic != "t" || len(st.lastDead.MsgIDs) != 3 || !strings.Contains(st.lastNote, "via the admin handler") {
		t.Fatalf("retry reached the store as %+v, note %q", st.lastDead, st.lastNote)
	}
	if code, body := do(t, h, "POST", "/dead/drop", `{"all":true,"yes":true}`); code != 200 || body != `{"dropped":1}`+"\n" || !st.lastDead.All {
		t.Fatalf("drop all: %d %s %+v", code, body, st.lastDead)
	}
}

func TestLogIDs(t *testing.T) {
	if got := logIDs([]string{"a", "b"}); got != "a,b" {
		t.Fatalf("%q", got)
	}
	ids := make([]string, 25)
	for i := range ids {
		ids[i] = "m"
	}
	if got := logIDs(ids); !strings.HasSuffix(got, "m and 5 more") || strings.Count(got, "m") != 21 {
		t.Fatalf("%q", got)
	}
}

func TestStoreErrors(t *testing.T) {
	st := &fakeStore{err: errors.New("connection refused")}
	h := newTestHandler(t, st, Config{Writable: true})
	if code, body := do(t, h, "GET", "/stats", ""); code != 500 || !strings.Contains(body, "connection refused") {
		t.Fatalf("%d %s", code, body)
	}
	st.err = context.DeadlineExceeded
	if code, body := do(t, h, "POST", "/dead/retry", `{"all":true}`); code != http.StatusGatewayTimeout {
		t.Fatalf("%d %s", code, body)
	}
}

// blockingStore holds Stats until released, to fill the handler's turns.
type blockingStore struct {
	fakeStore
	entered chan struct{}
	release chan struct{}
}

// Stats ignores ctx: a slow database that does not heed it.
func (b *blockingStore) Stats(context.Context) (outbox.Stats, error) {
	b.entered <- struct{}{}
	<-b.release
	return outbox.Stats{}, nil
}

func TestMaxInFlight(t *testing.T) {
	st := &blockingStore{entered: make(chan struct{}, 4), release: make(chan struct{})}
	h := newTestHandler(t, st, Config{MaxInFlight: 2, Timeout: 300 * time.Millisecond})
	done := make(chan int, 2)
	for range 2 {
		go func() {
			code, _ := do(t, h, "GET", "/stats", "")
			done <- code
		}()
	}
	<-st.entered
	<-st.entered
	// A third request waits for a turn, then gets 503; nothing reached the store.
	code, body := do(t, h, "GET", "/stats", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "MaxInFlight") {
		t.Fatalf("a third request: %d %s", code, body)
	}
	if len(st.entered) != 0 {
		t.Fatal("the third request reached the store")
	}
	close(st.release)
	for range 2 {
		if code := <-done; code != http.StatusOK {
			t.Fatalf("a request in flight: %d", code)
		}
	}
	if code, _ := do(t, h, "GET", "/stats", ""); code != http.StatusOK {
		t.Fatalf("after the turns came back: %d", code)
	}
	if _, err := NewHandler(Config{Store: st, MaxInFlight: -1}); err == nil {
		t.Fatal("a negative MaxInFlight was taken")
	}
}

// FuzzRequests sends arbitrary queries and bodies: the handler answers each
// with JSON and a 200, 400, 404 or 415, never panics, and never hands the
// store a filter outside its bounds.
func FuzzRequests(f *testing.F) {
	f.Add("status=dead&limit=10&after_id=3&topic=t", `{"msg_ids":["a"]}`)
	f.Add("limit=-1", `{"all":true,"yes":true}`)
	f.Add("status=NEW&status=SENT", `{"msg_ids":[""]}`)
	f.Add("%zz", `[`)
	st := &fakeStore{msgs: []outbox.Message{{ID: 1, MsgID: "a", Topic: "t", Status: outbox.StatusDead}}}
	h, err := NewHandler(Config{Store: st, Writable: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, query, body string) {
		for _, c := range []struct{ method, target, body string }{
			{"GET", "/messages?" + query, ""},
			{"POST", "/dead/retry", body},
			{"POST", "/dead/drop", body},
		} {
			req := httptest.NewRequest(c.method, "/", strings.NewReader(c.body))
			req.URL.Path, req.URL.RawQuery, _ = strings.Cut(c.target, "?")
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			switch rec.Code {
			case 200, 400, 404, 415:
			default:
				t.Fatalf("%s %s %q: %d %s", c.method, c.target, c.body, rec.Code, rec.Body)
			}
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("%s %s: not JSON: %q", c.method, c.target, rec.Body)
			}
			if lf := st.lastFilter; lf.Limit < 0 || lf.Limit > MaxListLimit || lf.AfterID < 0 {
				t.Fatalf("the store got %+v", lf)
			}
			if len(st.lastDead.MsgIDs) > MaxSelection {
				t.Fatalf("the store got %d msg_ids", len(st.lastDead.MsgIDs))
			}
		}
	})
}

// A row written before the publishers masked their URLs holds a token in
// last_error; the handler masks it when it serves the row, in a list and
// alone, and in a database error.
func TestLastErrorRedactedAtRead(t *testing.T) {
	const old = "webhook: POST https://hooks.example/in?token=t0ken-0f-2024: 503 Service Unavailable; " +
		"outboxnats: connect to nats://natstok3n@127.0.0.1:4222: refused; mysql://u:pa/ss?w#d@db:3306/x"
	st := &fakeStore{msgs: []outbox.Message{{ID: 1, MsgID: "m1", Topic: "t", Status: outbox.StatusDead, LastError: old}}}
	h := newTestHandler(t, st, Config{})
	for _, target := range []string{"/messages", "/messages/m1"} {
		code, body := do(t, h, "GET", target, "")
		if code != 200 {
			t.Fatalf("%s: %d %s", target, code, body)
		}
		for _, secret := range []string{"t0ken-0f-2024", "natstok3n", "pa/ss", "w#d"} {
			if strings.Contains(body, secret) {
				t.Errorf("%s serves %q: %s", target, secret, body)
			}
		}
		if !strings.Contains(body, "https://hooks.example/in?token=xxxxx: 503") {
			t.Errorf("%s: the rest of last_error should stay: %s", target, body)
		}
	}
	st.err = errors.New("dial nats://u:db-pw-77@h:4222 failed")
	if code, body := do(t, h, "GET", "/stats", ""); code != 500 || strings.Contains(body, "db-pw-77") || !strings.Contains(body, "u:xxxxx@h") {
		t.Fatalf("a database error: %d %s", code, body)
	}
}

package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestPagesWithoutLoginServeNoData(t *testing.T) {
	h := newHarness(t, 3, nil)
	code, body, hdr := h.do("GET", "/", "")
	if code != 200 || !strings.Contains(body, "<title>outbox console</title>") {
		t.Fatalf("GET /: %d", code)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	if code, _, _ := h.do("GET", "/assets/app.js", ""); code != 200 {
		t.Errorf("GET /assets/app.js: %d", code)
	}
	for _, path := range []string{"/api/session", "/api/dead", "/api/dead/count", "/api/message?msg_id=m-1", "/api/groups", "/api/backlog"} {
		code, body, _ := h.do("GET", path, "")
		if code != http.StatusUnauthorized || strings.Contains(body, "m-1") || strings.Contains(body, "payload") {
			t.Errorf("GET %s without login: %d %s", path, code, body)
		}
	}
	if code, _ := h.post("/api/dead/retry", `{"msg_ids":["m-1"]}`); code != http.StatusUnauthorized {
		t.Errorf("POST retry without login: %d", code)
	}
}

func TestLogin(t *testing.T) {
	h := newHarness(t, 3, nil)
	if code, _, _ := h.do("POST", "/api/login", `{"token":"wrong-wrong-wrong-wrong"}`); code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", code)
	}
	if code, _, _ := h.do("POST", "/api/login", `{"token":"`+secret+`"}`, "Origin", "https://evil.example"); code != http.StatusForbidden {
		t.Fatalf("login from another origin: %d", code)
	}
	h.login()
	ck := h.jar[0]
	if ck.Name != cookieName || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" {
		t.Fatalf("session cookie = %+v", ck)
	}
	code, body, _ := h.do("GET", "/api/message?msg_id=m-1", "")
	if code != 200 || !strings.Contains(body, `"secret":"payload"`) {
		t.Fatalf("GET /api/message after login: %d %s", code, body)
	}
	if code, _ := h.post("/api/logout", `{}`); code != 200 {
		t.Fatalf("logout: %d", code)
	}
	if code, _, _ := h.do("GET", "/api/dead", ""); code != http.StatusUnauthorized {
		t.Fatalf("after logout: %d", code)
	}
	if strings.Contains(h.log.String(), secret) {
		t.Errorf("the log shows the token:\n%s", h.log)
	}
}

func TestLoginsLimited(t *testing.T) {
	h := newHarness(t, 0, nil)
	for range 20 {
		h.do("POST", "/api/login", `{"token":"wrong-wrong-wrong-wrong"}`)
	}
	if code, _, _ := h.do("POST", "/api/login", `{"token":"`+secret+`"}`); code != http.StatusTooManyRequests {
		t.Fatalf("the 21st login within a minute: %d, want 429", code)
	}
}

func TestCSRF(t *testing.T) {
	h := newHarness(t, 3, nil)
	h.login()
	body := `{"msg_ids":["m-1"]}`
	for _, hdr := range [][]string{
		{"Origin", "http://console.test"},
		{"Origin", "http://console.test", "X-CSRF-Token", "forged"},
		{"Origin", "https://evil.example", "X-CSRF-Token", h.csrf},
		{"Sec-Fetch-Site", "cross-site", "X-CSRF-Token", h.csrf},
	} {
		if code, out, _ := h.do("POST", "/api/dead/drop", body, hdr...); code != http.StatusForbidden {
			t.Errorf("POST with %v: %d %s", hdr, code, out)
		}
	}
	if m, _ := h.st.GetMessage(t.Context(), "m-1"); m.Status != 2 {
		t.Fatal("a refused drop changed the row")
	}
	// Another session's CSRF token does not do either.
	other := newHarness(t, 0, nil)
	other.c = h.c
	other.login()
	if code, _, _ := h.do("POST", "/api/dead/drop", body, "Origin", "http://console.test", "X-CSRF-Token", other.csrf); code != http.StatusForbidden {
		t.Errorf("POST with another session's CSRF token: %d", code)
	}
	if code, out := h.post("/api/dead/drop", body); code != 200 || !strings.Contains(out, `"dropped":1`) {
		t.Fatalf("POST with the session's CSRF token: %d %s", code, out)
	}
	if !strings.Contains(h.log.String(), `msg="outbox console: DEAD messages dropped" who=alice via=session done=1 selected=1 msg_ids=m-1`) {
		t.Errorf("the drop was not logged with who and what:\n%s", h.log)
	}
}

func TestBearerTokenNeedsNoCSRF(t *testing.T) {
	h := newHarness(t, 3, nil)
	code, out, _ := h.do("POST", "/api/dead/retry", `{"msg_ids":["m-2"]}`, "Authorization", "Bearer "+secret)
	if code != 200 || !strings.Contains(out, `"retried":1`) {
		t.Fatalf("retry with a bearer token: %d %s", code, out)
	}
	m, _ := h.st.GetMessage(t.Context(), "m-2")
	if !strings.HasPrefix(m.LastError, "retried by alice at ") || !strings.Contains(m.LastError, "; previous error: broker refused m-2") {
		t.Fatalf("the retry's note: %q", m.LastError)
	}
	if code, _, _ := h.do("GET", "/api/dead", "", "Authorization", "Bearer nope-nope-nope-nope"); code != http.StatusUnauthorized {
		t.Fatalf("a wrong bearer token: %d", code)
	}
}

func TestProxyHeader(t *testing.T) {
	h := newHarness(t, 3, func(c *Config) { c.Tokens, c.AuthHeader = nil, "X-Forwarded-User" })
	if code, _, _ := h.do("GET", "/api/dead", ""); code != http.StatusUnauthorized {
		t.Fatalf("without the proxy's header: %d", code)
	}
	code, body, _ := h.do("GET", "/api/session", "", "X-Forwarded-User", "bob")
	var s sessionInfo
	if code != 200 || json.Unmarshal([]byte(body), &s) != nil || s.User != "bob" || s.Via != "proxy" || s.CSRF == "" {
		t.Fatalf("session behind the proxy: %d %s", code, body)
	}
	if code, _, _ := h.do("POST", "/api/dead/retry", `{"msg_ids":["m-1"]}`, "X-Forwarded-User", "bob", "Origin", "http://console.test"); code != http.StatusForbidden {
		t.Fatalf("a write behind the proxy without the CSRF token: %d", code)
	}
	code, _, _ = h.do("POST", "/api/dead/retry", `{"msg_ids":["m-1"]}`, "X-Forwarded-User", "bob", "Origin", "http://console.test", "X-CSRF-Token", s.CSRF)
	if code != 200 || !strings.Contains(h.log.String(), "who=bob via=proxy") {
		t.Fatalf("a write behind the proxy: %d\n%s", code, h.log)
	}
	// A bearer token is no way around the proxy.
	if code, _, _ := h.do("GET", "/api/dead", "", "Authorization", "Bearer "+secret); code != http.StatusUnauthorized {
		t.Fatalf("a bearer token behind the proxy: %d", code)
	}
}

func TestReadOnly(t *testing.T) {
	h := newHarness(t, 3, func(c *Config) { c.Writable = false })
	h.login()
	for _, path := range []string{"/api/dead/retry", "/api/dead/drop"} {
		if code, out := h.post(path, `{"msg_ids":["m-1"]}`); code != http.StatusForbidden || !strings.Contains(out, "read-only") {
			t.Errorf("POST %s on a read-only console: %d %s", path, code, out)
		}
	}
	if m, _ := h.st.GetMessage(t.Context(), "m-1"); m.Status != 2 {
		t.Fatal("a read-only console changed a row")
	}
}

func TestLimits(t *testing.T) {
	h := newHarness(t, 3, nil)
	h.login()
	for _, path := range []string{"/api/dead?limit=501", "/api/dead?limit=0", "/api/dead?after_id=-1", "/api/dead?colour=red",
		"/api/dead?topic=a&topic=b", "/api/dead?from=yesterday", "/api/dead?from=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z",
		"/api/dead?error=" + strings.Repeat("x", 257), "/api/message", "/api/dead/count?limit=5"} {
		if code, out, _ := h.do("GET", path, ""); code != http.StatusBadRequest {
			t.Errorf("GET %s: %d %s", path, code, out)
		}
	}
	many := make([]string, MaxSelection+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	ids, _ := json.Marshal(map[string]any{"msg_ids": many})
	for _, body := range []string{
		string(ids),
		`{"msg_ids":[""]}`,
		`{}`,
		`{"msg_ids":["m-1"],"filter":{}}`,
		`{"filter":{"topic":"a"}}`,
		`{"filter":{},"max_id":3,"dead_until":"2026-01-02T03:04:07Z"}`,
		`{"msg_ids":["m-1"],"colour":"red"}`,
		`{"msg_ids":["` + strings.Repeat("x", 2<<20) + `"]}`,
	} {
		if code, out := h.post("/api/dead/retry", body); code != http.StatusBadRequest {
			t.Errorf("POST retry %.80s: %d %.200s", body, code, out)
		}
	}
	if code, _, _ := h.do("POST", "/api/dead/retry", `{"msg_ids":["m-1"]}`, "Content-Type", "text/plain", "Origin", "http://console.test",
		"X-CSRF-Token", h.csrf); code != http.StatusUnsupportedMediaType {
		t.Errorf("a body that is not JSON: %d", code)
	}
}

func TestBoundedQueries(t *testing.T) {
	h := newHarness(t, 25000, nil)
	h.login()
	code, body, _ := h.do("GET", "/api/dead?error=tries&limit=500", "")
	if code != 200 {
		t.Fatalf("list: %d %s", code, body)
	}
	q := h.st.queries[len(h.st.queries)-1]
	if q.Limit != 500 || q.Scan != scanWindow || q.ErrorContains != "tries" {
		t.Fatalf("list asked the store %+v", q)
	}
	// A filter that matches one row in 25,000: each page reads one window.
	h.st.queries = nil
	var pages, found int
	for after := "0"; after != ""; pages++ {
		_, body, _ := h.do("GET", "/api/dead?error=m-24999%20&after_id="+after, "")
		var page listAnswer
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		found += len(page.Messages)
		after = ""
		if page.NextAfterID != nil {
			after = fmt.Sprint(*page.NextAfterID)
		}
	}
	if found != 1 || pages != 3 || len(h.st.queries) != 3 {
		t.Fatalf("found %d in %d pages, %d queries; want 1 in 3 windows of %d", found, pages, len(h.st.queries), scanWindow)
	}
	if code, body, _ := h.do("GET", "/api/dead/count", ""); code != 200 || h.st.countLimits[0] != MaxAction || !strings.Contains(body, `"count":25000`) {
		t.Fatalf("count: %d %s, limit %v", code, body, h.st.countLimits)
	}
	if strings.Contains(body, "payload") {
		t.Fatal("a list serves payloads")
	}
}

func TestBulkActionTouchesOnlyWhatWasCounted(t *testing.T) {
	h := newHarness(t, 10, nil)
	h.login()
	_, body, _ := h.do("GET", "/api/dead/count?topic=a", "")
	var c countAnswer
	if err := json.Unmarshal([]byte(body), &c); err != nil || c.Count != 5 || c.MaxID != 9 {
		t.Fatalf("count: %s", body)
	}
	// Meanwhile two more messages of topic a become DEAD: one with a
	// higher id, one with a lower id (a NEW row that fails late).
	h.st.msgs = append(h.st.msgs, h.st.msgs[0])
	h.st.msgs[10].ID, h.st.msgs[10].MsgID = 11, "late-high"
	h.st.msgs[10].DeadAt = c.DeadUntil.Add(1)
	h.st.msgs[2].MsgID, h.st.msgs[2].DeadAt = "late-low", c.DeadUntil.Add(2)
	act, _ := json.Marshal(Action{Filter: &Filter{Topic: "a"}, MaxID: c.MaxID, DeadUntil: c.DeadUntil, Expect: c.Count})
	code, out := h.post("/api/dead/retry", string(act))
	if code != 200 || !strings.Contains(out, `"retried":4`) {
		t.Fatalf("retry by filter: %d %s", code, out)
	}
	for _, id := range []string{"late-high", "late-low"} {
		if m, _ := h.st.GetMessage(t.Context(), id); m.Status != 2 {
			t.Errorf("%s became DEAD after the count and was retried", id)
		}
	}
	// A count that no longer holds (more rows within the bounds) is refused.
	later := c.DeadUntil.Add(1e12)
	stale, _ := json.Marshal(Action{Filter: &Filter{Topic: "b"}, MaxID: 10, DeadUntil: &later, Expect: 2})
	if code, out := h.post("/api/dead/drop", string(stale)); code != http.StatusConflict {
		t.Fatalf("a stale count: %d %s", code, out)
	}
}

func TestGroups(t *testing.T) {
	h := newHarness(t, 6, nil)
	h.st.msgs[5].LastError = "retried by alice at 2026-01-01T00:00:00Z via the console; previous error: schema mismatch in m-6"
	h.login()
	_, body, _ := h.do("GET", "/api/groups", "")
	var g groupsAnswer
	if err := json.Unmarshal([]byte(body), &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Groups) != 2 || g.Groups[0].Count != 5 || g.Groups[0].Label != "broker refused … after # tries" ||
		g.Groups[1].Label != "schema mismatch in …" || g.Scanned != 6 || g.MaxID != 6 {
		t.Fatalf("groups: %s", body)
	}
	act, _ := json.Marshal(Action{Group: &g.Groups[1].Signature, MaxID: g.MaxID, DeadUntil: g.DeadUntil, Expect: 1})
	if code, out := h.post("/api/dead/drop", string(act)); code != 200 || !strings.Contains(out, `"dropped":1`) {
		t.Fatalf("drop a group: %d %s", code, out)
	}
	if m, _ := h.st.GetMessage(t.Context(), "m-6"); m.Status == 2 {
		t.Fatal("the group's message is still DEAD")
	}
	if !strings.Contains(h.log.String(), `group="schema mismatch in …"`) {
		t.Errorf("the group's drop was not logged:\n%s", h.log)
	}
}

func TestHistory(t *testing.T) {
	got := history("retried by a at T1 via x; previous error: retried by b at T2 via y; previous error: boom; previous error: not a note")
	if len(got) != 3 || got[0].Text != "retried by a at T1 via x" || got[1].What != "retried" || got[2].Text != "boom; previous error: not a note" {
		t.Fatalf("history = %+v", got)
	}
	if h := history(""); len(h) != 0 {
		t.Fatalf("history of nothing = %+v", h)
	}
}

func TestUnauthenticated(t *testing.T) {
	h := newHarness(t, 2, func(c *Config) { c.Tokens, c.Unauthenticated = nil, true })
	code, body, _ := h.do("GET", "/api/session", "")
	var s sessionInfo
	if code != 200 || json.Unmarshal([]byte(body), &s) != nil || s.User != "anonymous" {
		t.Fatalf("session: %d %s", code, body)
	}
	if code, _, _ := h.do("POST", "/api/dead/drop", `{"msg_ids":["m-1"]}`, "Origin", "http://console.test"); code != http.StatusForbidden {
		t.Fatalf("a write without the CSRF token: %d", code)
	}
	h.csrf = s.CSRF
	if code, _ := h.post("/api/dead/drop", `{"msg_ids":["m-1"]}`); code != 200 {
		t.Fatalf("a write with it: %d", code)
	}
}

func TestBacklogSeries(t *testing.T) {
	h := newHarness(t, 4, nil)
	for range 3 {
		if err := h.c.sampleOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	h.login()
	_, body, _ := h.do("GET", "/api/backlog", "")
	var b backlogAnswer
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Series) != 3 || b.Now == nil || *b.Now.Pending != 3 || b.Rates != "estimate" || len(b.Topics) != 1 || b.Series[0].SentRate != nil || b.Series[2].SentRate == nil {
		t.Fatalf("backlog: %s", body)
	}
	small := newRing(2)
	for i := range 5 {
		small.add(sample{maxID: int64(i)})
	}
	if all := small.all(); len(all) != 2 || all[0].maxID != 3 || all[1].maxID != 4 {
		t.Fatalf("ring keeps %+v", all)
	}
}

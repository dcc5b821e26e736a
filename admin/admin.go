package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/outbox-go/outbox/internal/jsonhttp"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/outboxdriver"
)

// Config configures the admin handler.
type Config struct {
	// Store is the outbox table to serve: a driver. Required. GET /backlog
	// needs it to implement outboxdriver.BacklogReader.
	Store outboxdriver.Admin
	// Writable enables POST /dead/retry and POST /dead/drop. Without it they
	// answer 403 and the handler only reads. Defaults to false.
	Writable bool
	// Token, when set, must come with every request as
	// "Authorization: Bearer <Token>"; a request without it gets 401. Leave
	// it empty only where something in front of the handler authenticates
	// (a middleware, a proxy) or where only trusted callers can reach it.
	// Defaults to "" (no token).
	Token string
	// Timeout bounds the database work of one request. Defaults to 10s.
	Timeout time.Duration
	// Logger records every retry and drop, and the database errors behind a
	// 500. Defaults to slog.Default().
	Logger *slog.Logger
	// MaxInFlight bounds the requests that use the database at once, so
	// that the handler takes at most this many connections from a pool it
	// shares with relays; the others wait their turn within Timeout, then
	// get 503. Defaults to 2.
	MaxInFlight int
}

// WithDefaults returns cfg with zero fields defaulted.
func (cfg Config) WithDefaults() Config {
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 2
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

func (cfg Config) validate() error {
	switch {
	case cfg.Store == nil:
		return errors.New("admin: Config.Store is nil; give the store of the outbox table to serve")
	case cfg.Timeout < 0:
		return fmt.Errorf("admin: Config.Timeout %v is negative", cfg.Timeout)
	case cfg.MaxInFlight < 0:
		return fmt.Errorf("admin: Config.MaxInFlight %d is negative", cfg.MaxInFlight)
	}
	return nil
}

// Limits of a request.
const (
	// MaxListLimit is the largest page GET /messages serves.
	MaxListLimit = 10000
	// DefaultListLimit is the page size when the request gives none.
	DefaultListLimit = 100
	// MaxSelection is the most msg_ids one retry or drop may name.
	MaxSelection = 10000
	// maxBody bounds a POST body: 10,000 msg_ids of 64 characters fit.
	maxBody = 1 << 20
)

// handler is the http.Handler NewHandler returns.
type handler struct {
	cfg   Config
	token [sha256.Size]byte
	mux   *http.ServeMux
	turns chan struct{} // a token per request allowed at the database
}

// NewHandler returns an http.Handler that serves cfg.Store's admin calls as
// JSON (see the package documentation for the routes). Its routes start at
// "/": mount it under a prefix with http.StripPrefix.
func NewHandler(cfg Config) (http.Handler, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &handler{cfg: cfg, token: sha256.Sum256([]byte(cfg.Token)), mux: http.NewServeMux(),
		turns: make(chan struct{}, cfg.MaxInFlight)}
	h.route("/stats", http.MethodGet, h.stats)
	h.route("/backlog", http.MethodGet, h.backlog)
	h.route("/messages", http.MethodGet, h.list)
	h.route("/messages/{msg_id...}", http.MethodGet, h.show)
	h.route("/dead/retry", http.MethodPost, h.retry)
	h.route("/dead/drop", http.MethodPost, h.drop)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, http.StatusNotFound, fmt.Sprintf("no route %s; the routes are GET /stats, GET /backlog, GET /messages, "+
			"GET /messages/{msg_id}, POST /dead/retry and POST /dead/drop", r.URL.Path))
	})
	return h, nil
}

// route registers fn for path, answering any other method with 405 and a
// JSON body rather than ServeMux's plain text.
func (h *handler) route(path, method string, fn func(http.ResponseWriter, *http.Request)) {
	h.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && (method != http.MethodGet || r.Method != http.MethodHead) {
			w.Header().Set("Allow", method)
			fail(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, method))
			return
		}
		wait := time.NewTimer(h.cfg.Timeout)
		defer wait.Stop()
		select {
		case h.turns <- struct{}{}:
			defer func() { <-h.turns }()
		case <-wait.C:
			w.Header().Set("Retry-After", "1")
			fail(w, http.StatusServiceUnavailable, fmt.Sprintf("busy: %d requests are at the database already (MaxInFlight); try again", h.cfg.MaxInFlight))
			return
		case <-r.Context().Done():
			return
		}
		fn(w, r)
	})
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if h.cfg.Token != "" {
		// The scheme's name is case-insensitive (RFC 9110, 11.1).
		scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		ok = ok && strings.EqualFold(scheme, "Bearer")
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], h.token[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="outbox admin"`)
			fail(w, http.StatusUnauthorized, "missing or wrong token: send the header Authorization: Bearer <token>")
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

func (h *handler) stats(w http.ResponseWriter, r *http.Request) {
	if !noQuery(w, r) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	st, err := h.cfg.Store.Stats(ctx)
	if err != nil {
		h.storeError(w, r, "stats", err)
		return
	}
	reply(w, http.StatusOK, StatsOf(h.cfg.Store.Tables().Outbox, st))
}

func (h *handler) backlog(w http.ResponseWriter, r *http.Request) {
	if !noQuery(w, r) {
		return
	}
	br, ok := h.cfg.Store.(outboxdriver.BacklogReader)
	if !ok {
		fail(w, http.StatusNotImplemented, "this store does not read a backlog cheaply; use GET /stats")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	b, err := br.Backlog(ctx)
	if err != nil {
		h.storeError(w, r, "backlog", err)
		return
	}
	out := Backlog{Table: h.cfg.Store.Tables().Outbox, Pending: b.Pending, OldestPendingAgeSeconds: b.OldestPendingAge.Seconds()}
	if b.DeadCounted {
		out.Dead = &b.Dead
	}
	reply(w, http.StatusOK, out)
}

// list serves GET /messages?status=dead&topic=T&after_id=N&limit=N.
func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	f, err := listFilter(r.URL.Query())
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	msgs, err := h.cfg.Store.ListMessages(ctx, f)
	if err != nil {
		h.storeError(w, r, "list messages", err)
		return
	}
	out := MessageList{Messages: make([]Message, 0, len(msgs))}
	for _, m := range msgs {
		m.Payload = nil
		out.Messages = append(out.Messages, MessageOf(m))
	}
	if len(msgs) == f.Limit {
		out.NextAfterID = &msgs[len(msgs)-1].ID
	}
	reply(w, http.StatusOK, out)
}

// listFilter reads GET /messages's query; it refuses a parameter it does
// not know, so that a misspelt one does not widen the list unnoticed.
func listFilter(q url.Values) (outbox.ListFilter, error) {
	f := outbox.ListFilter{Status: outbox.StatusDead, Limit: DefaultListLimit}
	for name, vals := range q {
		if len(vals) != 1 {
			return f, fmt.Errorf("query parameter %s is given %d times; give it once", name, len(vals))
		}
		v := vals[0]
		switch name {
		case "status":
			s, ok := parseStatus(v)
			if !ok {
				return f, fmt.Errorf("status=%q: use new, sent or dead", v)
			}
			f.Status = s
		case "topic":
			f.Topic = v
		case "after_id":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return f, fmt.Errorf("after_id=%q: use a message id, 0 or more (a page's next_after_id)", v)
			}
			f.AfterID = n
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxListLimit {
				return f, fmt.Errorf("limit=%q: use 1..%d", v, MaxListLimit)
			}
			f.Limit = n
		default:
			return f, fmt.Errorf("unknown query parameter %q; use status, topic, after_id and limit", name)
		}
	}
	return f, nil
}

func parseStatus(s string) (outbox.Status, bool) {
	for _, st := range []outbox.Status{outbox.StatusNew, outbox.StatusSent, outbox.StatusDead} {
		if strings.EqualFold(s, st.String()) {
			return st, true
		}
	}
	return 0, false
}

// show serves GET /messages/{msg_id}, a message of any status with its
// payload and headers.
func (h *handler) show(w http.ResponseWriter, r *http.Request) {
	if !noQuery(w, r) {
		return
	}
	id := r.PathValue("msg_id")
	if id == "" {
		fail(w, http.StatusNotFound, "give a msg_id: GET /messages/{msg_id}")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	m, err := h.cfg.Store.GetMessage(ctx, id)
	if errors.Is(err, outbox.ErrNotFound) {
		fail(w, http.StatusNotFound, fmt.Sprintf("no message with msg_id %q in table %q", id, h.cfg.Store.Tables().Outbox))
		return
	}
	if err != nil {
		h.storeError(w, r, "get message", err)
		return
	}
	reply(w, http.StatusOK, MessageOf(m))
}

func (h *handler) retry(w http.ResponseWriter, r *http.Request) {
	sel, f, ok := h.selection(w, r, "retry")
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	note := fmt.Sprintf("retried by operator at %s via the admin handler (from %s); previous error: ",
		time.Now().UTC().Format(time.RFC3339), r.RemoteAddr)
	n, err := h.cfg.Store.RetryDead(ctx, f, note)
	if err != nil {
		h.storeError(w, r, "retry dead messages", err)
		return
	}
	h.cfg.Logger.Info("outbox admin: DEAD messages retried", "retried", n, "msg_ids", logIDs(sel.MsgIDs), "all", sel.All,
		"topic", sel.Topic, "remote", r.RemoteAddr)
	reply(w, http.StatusOK, Changed{Retried: &n, Unmatched: unmatched(sel, n)})
}

func (h *handler) drop(w http.ResponseWriter, r *http.Request) {
	sel, f, ok := h.selection(w, r, "drop")
	if !ok {
		return
	}
	if sel.All && !sel.Yes {
		fail(w, http.StatusBadRequest, `"all": true deletes every DEAD message`+scope(sel.Topic)+`; add "yes": true to confirm (see them first with GET /messages?status=dead)`)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	n, err := h.cfg.Store.DropDead(ctx, f)
	if err != nil {
		h.storeError(w, r, "drop dead messages", err)
		return
	}
	h.cfg.Logger.Info("outbox admin: DEAD messages dropped", "dropped", n, "msg_ids", logIDs(sel.MsgIDs), "all", sel.All,
		"topic", sel.Topic, "remote", r.RemoteAddr)
	reply(w, http.StatusOK, Changed{Dropped: &n, Unmatched: unmatched(sel, n)})
}

// selection reads and checks the body of a retry or a drop.
func (h *handler) selection(w http.ResponseWriter, r *http.Request, verb string) (Selection, outbox.DeadFilter, bool) {
	var sel Selection
	if !h.cfg.Writable {
		fail(w, http.StatusForbidden, "this admin handler is read-only: it was not made Writable (outbox relay: --admin-writable)")
		return sel, outbox.DeadFilter{}, false
	}
	// Only a JSON body is taken: a browser cannot send one to another
	// site without the site's consent (CORS), as it can a form.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		fail(w, http.StatusUnsupportedMediaType, "send the body as Content-Type: application/json")
		return sel, outbox.DeadFilter{}, false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sel); err != nil {
		fail(w, http.StatusBadRequest, fmt.Sprintf("%s: the body is not a selection: %v; send {\"msg_ids\": [...]} or {\"all\": true, \"topic\": ...}", verb, err))
		return sel, outbox.DeadFilter{}, false
	}
	if dec.More() {
		fail(w, http.StatusBadRequest, verb+": the body holds more than one JSON value; send one selection")
		return sel, outbox.DeadFilter{}, false
	}
	switch {
	case len(sel.MsgIDs) == 0 && !sel.All:
		fail(w, http.StatusBadRequest, verb+`: give the msg_ids to act on ("msg_ids": [...]), or "all": true (with "topic" to limit it to one topic)`)
		return sel, outbox.DeadFilter{}, false
	case len(sel.MsgIDs) > 0 && sel.All:
		fail(w, http.StatusBadRequest, verb+`: give either "msg_ids" or "all", not both`)
		return sel, outbox.DeadFilter{}, false
	case len(sel.MsgIDs) > MaxSelection:
		fail(w, http.StatusBadRequest, fmt.Sprintf("%s: %d msg_ids is more than %d; send them in parts", verb, len(sel.MsgIDs), MaxSelection))
		return sel, outbox.DeadFilter{}, false
	}
	for _, id := range sel.MsgIDs {
		if id == "" {
			fail(w, http.StatusBadRequest, verb+": an empty msg_id; every msg_id has 1 to 64 characters")
			return sel, outbox.DeadFilter{}, false
		}
	}
	return sel, outbox.DeadFilter{MsgIDs: sel.MsgIDs, All: sel.All, Topic: sel.Topic}, true
}

// logIDs is what the log says of the msg_ids a retry or a drop named: the
// ids themselves, for the record (a dropped row is gone), up to 20, then
// how many more.
func logIDs(ids []string) string {
	const shown = 20
	if len(ids) <= shown {
		return strings.Join(ids, ",")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:shown], ","), len(ids)-shown)
}

func unmatched(sel Selection, n int64) int64 {
	if len(sel.MsgIDs) == 0 {
		return 0
	}
	return max(0, int64(len(sel.MsgIDs))-n)
}

func scope(topic string) string {
	if topic == "" {
		return ""
	}
	return fmt.Sprintf(" of topic %q", topic)
}

// noQuery refuses a query on a route that takes none.
func noQuery(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.RawQuery != "" {
		fail(w, http.StatusBadRequest, fmt.Sprintf("%s takes no query parameters", r.URL.Path))
		return false
	}
	return true
}

// storeError answers a database error: 504 when the request's time ran
// out, 500 otherwise, and logs it.
func (h *handler) storeError(w http.ResponseWriter, r *http.Request, what string, err error) {
	status := http.StatusInternalServerError
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	if r.Context().Err() != nil {
		return // the client has gone
	}
	msg := redact.Text(err.Error())
	h.cfg.Logger.Warn("outbox admin: "+what+" failed", "error", msg, "path", r.URL.Path)
	fail(w, status, what+": "+msg)
}

// reply and fail write JSON answers.
var reply, fail = jsonhttp.Reply, jsonhttp.Fail

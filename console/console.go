package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"github.com/outbox-go/outbox/internal/jsonhttp"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/outbox-go/outbox/internal/redact"
	"github.com/outbox-go/outbox/outboxdriver"
)

//go:embed assets
var assets embed.FS

// Limits of the console's calls.
const (
	// MaxPage is the most DEAD messages one page lists.
	MaxPage = 500
	// DefaultPage is the page size when the request gives none.
	DefaultPage = 50
	// MaxAction is the most DEAD messages one count counts and one bulk
	// retry or drop touches; run it again for the rest.
	MaxAction = 100000
	// MaxGroupScan is the most DEAD rows one failure grouping reads, oldest
	// first.
	MaxGroupScan = 50000
	// MaxSelection is the most msg_ids one retry or drop may name.
	MaxSelection = 10000
	// scanWindow is the most DEAD rows one page of a search reads.
	scanWindow = 10000
	// maxBody bounds a POST body.
	maxBody = 1 << 20
)

// Token is a secret that opens the console, and the name that the log
// gives whoever used it.
type Token struct {
	Name   string
	Secret string
}

// Config configures the console.
type Config struct {
	// Store is the outbox table to serve. Required. It must implement
	// outboxdriver.DeadSearcher for the DEAD pages and
	// outboxdriver.TopicBacklogReader for the backlog; every driver of this
	// repository does.
	Store outboxdriver.Admin
	// Writable enables retry and drop. Defaults to false: the console reads.
	Writable bool
	// Tokens are the secrets that open the console. Each needs a Name and
	// a Secret of 16 characters or more.
	Tokens []Token
	// AuthHeader, when set, is the header in which an authenticating
	// reverse proxy names the user, such as X-Forwarded-User; a request
	// without it gets 401. Set it only when no one can reach the handler
	// but through that proxy. Tokens are then not asked for.
	AuthHeader string
	// Unauthenticated lets everyone who reaches the handler in, with the
	// name "anonymous". Defaults to false; New refuses a Config without
	// Tokens, AuthHeader or Unauthenticated.
	Unauthenticated bool
	// SecureCookie marks the session cookie Secure, for a handler behind a
	// proxy that terminates TLS. Defaults to false; a request that came
	// over TLS gets a Secure cookie anyway.
	SecureCookie bool
	// Timeout bounds the database work of one request. Defaults to 10s.
	Timeout time.Duration
	// MaxInFlight bounds the requests and samples that use the database at
	// once. Defaults to 2.
	MaxInFlight int
	// SampleEvery is how often Run samples the backlog. Defaults to 5s.
	SampleEvery time.Duration
	// Samples is how many samples the backlog's chart keeps. Defaults to
	// 720 (an hour at 5s).
	Samples int
	// SessionTTL is how long a login lasts. Defaults to 12h.
	SessionTTL time.Duration
	// Logger records every retry and drop, and failures. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Console is the console's http.Handler. It is also an outbox.BatchHook:
// given to the relays of the same process (RelayConfig.Hooks), it counts
// what they send and kill per topic, for the backlog's rates.
type Console struct {
	cfg      Config
	search   outboxdriver.DeadSearcher
	backlog  outboxdriver.TopicBacklogReader
	mux      *http.ServeMux
	turns    chan struct{}
	key      []byte // signs CSRF tokens
	sessions *sessions
	ring     *ring
	counts   *counts
	logins   *limiter
}

// New returns the console of cfg.Store. Its routes start at "/": mount it
// under a prefix with http.StripPrefix. Call Run to sample the backlog.
func New(cfg Config) (*Console, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, mux: http.NewServeMux(), turns: make(chan struct{}, cfg.MaxInFlight),
		key: make([]byte, 32), sessions: newSessions(cfg.SessionTTL), ring: newRing(cfg.Samples),
		counts: newCounts(), logins: newLimiter(20, time.Minute)}
	_, _ = rand.Read(c.key)
	var ok bool
	if c.search, ok = cfg.Store.(outboxdriver.DeadSearcher); !ok {
		return nil, fmt.Errorf("console: store %T does not search its DEAD rows (outboxdriver.DeadSearcher)", cfg.Store)
	}
	if c.backlog, ok = cfg.Store.(outboxdriver.TopicBacklogReader); !ok {
		return nil, fmt.Errorf("console: store %T does not read its backlog per topic (outboxdriver.TopicBacklogReader)", cfg.Store)
	}
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	c.mux.Handle("GET /assets/", http.StripPrefix("/assets", files))
	c.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, static, "index.html")
	})
	c.mux.HandleFunc("POST /api/login", c.login)
	c.mux.HandleFunc("POST /api/logout", c.authed(c.logout, write))
	c.mux.HandleFunc("GET /api/session", c.authed(c.session, read))
	c.mux.HandleFunc("GET /api/backlog", c.authed(c.serveBacklog, read))
	c.mux.HandleFunc("GET /api/dead", c.authed(c.db(c.list), read))
	c.mux.HandleFunc("GET /api/dead/count", c.authed(c.db(c.count), read))
	c.mux.HandleFunc("GET /api/message", c.authed(c.db(c.show), read))
	c.mux.HandleFunc("GET /api/groups", c.authed(c.db(c.groups), read))
	c.mux.HandleFunc("POST /api/dead/retry", c.authed(c.act(retry), write))
	c.mux.HandleFunc("POST /api/dead/drop", c.authed(c.act(drop), write))
	c.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	return c, nil
}

// WithDefaults returns cfg with zero fields defaulted.
func (cfg Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.Timeout, 10*time.Second)
	def(&cfg.SampleEvery, 5*time.Second)
	def(&cfg.SessionTTL, 12*time.Hour)
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 2
	}
	if cfg.Samples == 0 {
		cfg.Samples = 720
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

func (cfg Config) validate() error {
	switch {
	case cfg.Store == nil:
		return errors.New("console: Config.Store is nil; give the store of the outbox table to serve")
	case len(cfg.Tokens) == 0 && cfg.AuthHeader == "" && !cfg.Unauthenticated:
		return errors.New("console: give Config.Tokens, or Config.AuthHeader behind an authenticating proxy, " +
			"or set Config.Unauthenticated where only trusted callers reach the handler")
	case cfg.Timeout < 0 || cfg.MaxInFlight < 0 || cfg.SampleEvery < 0 || cfg.Samples < 0 || cfg.SessionTTL < 0:
		return errors.New("console: Timeout, MaxInFlight, SampleEvery, Samples and SessionTTL must not be negative")
	}
	for i, t := range cfg.Tokens {
		if t.Name == "" || len(t.Secret) < 16 {
			return fmt.Errorf("console: Config.Tokens[%d] needs a Name and a Secret of 16 characters or more", i)
		}
	}
	return nil
}

// ServeHTTP implements http.Handler.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// db gives fn a turn at the database (MaxInFlight) and a context bounded
// by Timeout.
func (c *Console) db(fn func(context.Context, http.ResponseWriter, *http.Request, who)) func(http.ResponseWriter, *http.Request, who) {
	return func(w http.ResponseWriter, r *http.Request, id who) {
		ctx, cancel := context.WithTimeout(r.Context(), c.cfg.Timeout)
		defer cancel()
		if !c.turn(ctx) {
			if r.Context().Err() == nil {
				w.Header().Set("Retry-After", "1")
				fail(w, http.StatusServiceUnavailable, fmt.Sprintf("busy: %d requests are at the database already; try again", c.cfg.MaxInFlight))
			}
			return
		}
		defer func() { <-c.turns }()
		fn(ctx, w, r, id)
	}
}

func (c *Console) turn(ctx context.Context) bool {
	select {
	case c.turns <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// storeError answers a database error: 504 when the time ran out, else 500.
func (c *Console) storeError(w http.ResponseWriter, r *http.Request, what string, err error) {
	if r.Context().Err() != nil {
		return
	}
	status := http.StatusInternalServerError
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	msg := redact.Text(err.Error())
	c.cfg.Logger.Warn("outbox console: "+what+" failed", "error", msg, "path", r.URL.Path)
	fail(w, status, what+": "+msg)
}

// reply and fail write JSON answers.
var reply, fail = jsonhttp.Reply, jsonhttp.Fail

// sign returns the CSRF token of a session key.
func (c *Console) sign(key string) string {
	m := hmac.New(sha256New, c.key)
	m.Write([]byte("csrf\x00" + key))
	return b64(m.Sum(nil))
}

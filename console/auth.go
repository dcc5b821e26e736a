package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// cookieName is the session cookie's name.
const cookieName = "outbox_console"

// maxSessions bounds the logins held at once; the oldest goes first.
const maxSessions = 1000

var sha256New = sha256.New

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// who is the caller of a request: Name for the log, Via how it proved it
// (token, session, proxy, none), and the key its CSRF token is signed for
// ("" when the call needs none: a bearer token, which a browser does not
// send on its own).
type who struct {
	Name, Via string
	csrfKey   string
}

type mode int

const (
	read mode = iota
	write
)

// authed runs fn for a caller who proved who they are; a write also needs
// the Origin of the handler's host and, unless it came with a bearer
// token, the caller's CSRF token.
func (c *Console) authed(fn func(http.ResponseWriter, *http.Request, who), m mode) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := c.identify(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="outbox console"`)
			fail(w, http.StatusUnauthorized, c.loginHint())
			return
		}
		if m == write {
			if msg := sameOrigin(r); msg != "" {
				fail(w, http.StatusForbidden, msg)
				return
			}
			if id.csrfKey != "" {
				got := r.Header.Get("X-CSRF-Token")
				if subtle.ConstantTimeCompare([]byte(got), []byte(c.sign(id.csrfKey))) != 1 {
					fail(w, http.StatusForbidden, "missing or wrong CSRF token: send the X-CSRF-Token header that GET /api/session gives")
					return
				}
			}
		}
		fn(w, r, id)
	}
}

func (c *Console) loginHint() string {
	if c.cfg.AuthHeader != "" {
		return fmt.Sprintf("not authenticated: the request did not come through the authenticating proxy (no %s header)", c.cfg.AuthHeader)
	}
	return "not authenticated: log in with a token (POST /api/login), or send Authorization: Bearer <token>"
}

// identify finds who sent r.
func (c *Console) identify(r *http.Request) (who, bool) {
	if c.cfg.AuthHeader != "" {
		user := strings.TrimSpace(r.Header.Get(c.cfg.AuthHeader))
		if user == "" || len(user) > 256 {
			return who{}, false
		}
		return who{Name: user, Via: "proxy", csrfKey: "proxy\x00" + user}, true
	}
	if scheme, secret, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		name, ok := c.tokenName(secret)
		return who{Name: name, Via: "token"}, ok
	}
	if ck, err := r.Cookie(cookieName); err == nil {
		if name, ok := c.sessions.get(ck.Value); ok {
			return who{Name: name, Via: "session", csrfKey: "session\x00" + ck.Value}, true
		}
	}
	if c.cfg.Unauthenticated {
		return who{Name: "anonymous", Via: "none", csrfKey: "none"}, true
	}
	return who{}, false
}

// tokenName returns the name of the token secret, comparing it with every
// token in constant time.
func (c *Console) tokenName(secret string) (string, bool) {
	got := sha256.Sum256([]byte(secret))
	name, found := "", false
	for _, t := range c.cfg.Tokens {
		want := sha256.Sum256([]byte(t.Secret))
		if subtle.ConstantTimeCompare(got[:], want[:]) == 1 && !found {
			name, found = t.Name, true
		}
	}
	return name, found
}

// sameOrigin returns why a write does not come from the handler's own
// page, or "". Browsers send Origin with every POST; a script that sends
// none is no browser, and a bearer token or the proxy vouches for it.
func sameOrigin(r *http.Request) string {
	o := r.Header.Get("Origin")
	if o == "" {
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
			return "refused: the request came from another site (Sec-Fetch-Site: " + site + ")"
		}
		return ""
	}
	u, err := url.Parse(o)
	if err != nil || !strings.EqualFold(u.Host, r.Host) {
		return fmt.Sprintf("refused: the request came from %q, not from this console's host %q", o, r.Host)
	}
	return ""
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if msg := sameOrigin(r); msg != "" {
		fail(w, http.StatusForbidden, msg)
		return
	}
	if len(c.cfg.Tokens) == 0 {
		fail(w, http.StatusBadRequest, "this console takes no token: "+c.loginHint())
		return
	}
	if !c.logins.allow() {
		w.Header().Set("Retry-After", "60")
		fail(w, http.StatusTooManyRequests, "too many failed logins; wait a minute")
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		fail(w, http.StatusUnsupportedMediaType, "send the body as Content-Type: application/json")
		return
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
		fail(w, http.StatusBadRequest, `send {"token": "..."}`)
		return
	}
	name, ok := c.tokenName(body.Token)
	if !ok {
		c.logins.failed()
		c.cfg.Logger.Warn("outbox console: login refused: wrong token", "remote", r.RemoteAddr)
		fail(w, http.StatusUnauthorized, "wrong token")
		return
	}
	id := c.sessions.add(name)
	// Secure only over TLS (or behind a TLS proxy, SecureCookie): a console
	// on http://127.0.0.1 needs its cookie too.
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, //nolint:gosec // G124: see above
		Secure: c.cfg.SecureCookie || r.TLS != nil, MaxAge: int(c.cfg.SessionTTL.Seconds())})
	c.cfg.Logger.Info("outbox console: login", "who", name, "remote", r.RemoteAddr)
	reply(w, http.StatusOK, c.sessionOf(who{Name: name, Via: "session", csrfKey: "session\x00" + id}))
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, _ who) {
	if ck, err := r.Cookie(cookieName); err == nil {
		c.sessions.remove(ck.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1, //nolint:gosec // G124: it deletes the cookie
		Secure: c.cfg.SecureCookie || r.TLS != nil})
	reply(w, http.StatusOK, struct{}{})
}

// sessionInfo is what GET /api/session serves.
type sessionInfo struct {
	User     string `json:"user"`
	Via      string `json:"via"`
	Writable bool   `json:"writable"`
	CSRF     string `json:"csrf,omitempty"`
	Table    string `json:"table"`
	Dialect  string `json:"dialect"`
	Logout   bool   `json:"logout"`
}

func (c *Console) sessionOf(id who) sessionInfo {
	s := sessionInfo{User: id.Name, Via: id.Via, Writable: c.cfg.Writable, Table: c.cfg.Store.Tables().Outbox,
		Dialect: c.cfg.Store.Dialect(), Logout: id.Via == "session"}
	if id.csrfKey != "" {
		s.CSRF = c.sign(id.csrfKey)
	}
	return s
}

func (c *Console) session(w http.ResponseWriter, _ *http.Request, id who) {
	reply(w, http.StatusOK, c.sessionOf(id))
}

// sessions are the logins, by their cookie's value.
type sessions struct {
	mu  sync.Mutex
	ttl time.Duration
	m   map[string]sessionEntry
}

type sessionEntry struct {
	name    string
	expires time.Time
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{ttl: ttl, m: map[string]sessionEntry{}}
}

func (s *sessions) add(name string) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	id := b64(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if len(s.m) >= maxSessions {
		oldest, at := "", now.Add(s.ttl)
		for k, e := range s.m {
			if e.expires.Before(now) {
				delete(s.m, k)
			} else if e.expires.Before(at) {
				oldest, at = k, e.expires
			}
		}
		if len(s.m) >= maxSessions {
			delete(s.m, oldest)
		}
	}
	s.m[id] = sessionEntry{name: name, expires: now.Add(s.ttl)}
	return id
}

func (s *sessions) get(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[id]
	if !ok || time.Now().After(e.expires) {
		delete(s.m, id)
		return "", false
	}
	return e.name, true
}

func (s *sessions) remove(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

// limiter allows a number of failures per period.
type limiter struct {
	mu     sync.Mutex
	max    int
	period time.Duration
	start  time.Time
	n      int
}

func newLimiter(n int, period time.Duration) *limiter { return &limiter{max: n, period: period} }

func (l *limiter) allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.start) > l.period {
		l.start, l.n = time.Now(), 0
	}
	return l.n < l.max
}

func (l *limiter) failed() {
	l.mu.Lock()
	l.n++
	l.mu.Unlock()
}

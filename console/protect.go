package console

import (
	"net/http"
)

// Protect returns h behind the console's access rules, for an API served
// beside the console (package admin's JSON handler): a request needs the
// identity the console's calls need (a session, a bearer token, the
// proxy's header), and one that is not a GET or a HEAD the Origin of the
// handler's own host. A CSRF token is not asked for: the admin handler's
// writes take only a JSON body, which a page of another site cannot send
// without this handler's consent, and the session cookie is SameSite=Strict.
// Every write is logged with who sent it.
func (c *Console) Protect(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		id, ok := c.identify(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="outbox admin"`)
			fail(w, http.StatusUnauthorized, c.loginHint())
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if msg := sameOrigin(r); msg != "" {
				fail(w, http.StatusForbidden, msg)
				return
			}
			c.cfg.Logger.Info("outbox admin: write request", "who", id.Name, "via", id.Via, "method", r.Method,
				"path", r.URL.Path, "remote", r.RemoteAddr)
		}
		h.ServeHTTP(w, r)
	})
}

package relaycmd

import (
	"bufio"
	"context"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/outbox-go/outbox/admin"
	"github.com/outbox-go/outbox/console"
	"github.com/outbox-go/outbox/outboxdriver"
)

// adminInFlight is how many requests of the admin server use the database
// at once: 2 for the JSON API, 2 for the console (its backlog samples
// included). The relay's pool has that many connections more.
const adminInFlight = 4

// adminOptions are the flags of the admin server, which serves the console
// at / and the JSON admin API at /admin/: outbox relay --admin-addr and
// outbox console.
type adminOptions struct {
	addr       string
	token      string
	tokenFile  string
	writable   bool
	insecure   bool
	authHeader string
	// sampleEvery is how often the console samples the backlog (0: its
	// default).
	sampleEvery time.Duration
	// loaded are the tokens of --admin-token and --admin-token-file, read
	// by validate.
	loaded []console.Token
}

// addAdminFlags adds the flags of the admin server but its address.
func addAdminFlags(f *cli.FlagSet, o *adminOptions) {
	f.StringVar(&o.token, "admin-token", "", "TOKEN",
		"a token that opens the console and the admin API (browser: log in once; scripts: 'Authorization: Bearer TOKEN'), "+
			"16 characters or more; give it in the variable or --admin-token-file, which ps does not show")
	f.StringVar(&o.tokenFile, "admin-token-file", "", "FILE",
		"read the admin tokens from FILE, one a line, each optionally after a name and a space ('alice 9f2c...'): "+
			"the log names who retried or dropped by the token's name")
	f.BoolVar(&o.writable, "admin-writable", "let the console and the admin API retry and drop DEAD messages; needs a token or --admin-auth-header")
	f.BoolVar(&o.insecure, "admin-insecure",
		"serve message payloads without a token on an address that is not loopback; only where the network lets trusted callers alone reach it")
	f.StringVar(&o.authHeader, "admin-auth-header", "", "HEADER",
		"trust an authenticating reverse proxy: HEADER (such as X-Forwarded-User) names the user, and no token is asked for; "+
			"only when nothing but the proxy can reach the address")
}

// validate checks the admin flags once addr is known; bad makes a usage
// error. flag is the name of the address's flag.
func (o *adminOptions) validate(flag string, bad func(string, ...any) error) error {
	hasToken := o.token != "" || o.tokenFile != ""
	switch {
	case o.addr == "" && (hasToken || o.writable || o.insecure || o.authHeader != ""):
		return bad("--admin-token, --admin-token-file, --admin-writable, --admin-insecure and --admin-auth-header need --%s", flag)
	case o.addr == "":
		return nil
	case o.token != "" && len(o.token) < 16:
		return bad("--admin-token (or OUTBOX_ADMIN_TOKEN) is %d characters long; give 16 or more, such as the output of 'openssl rand -hex 16'", len(o.token))
	case o.authHeader != "" && hasToken:
		return bad("give either --admin-auth-header (a proxy authenticates) or a token, not both")
	case o.authHeader != "" && !validHeaderName(o.authHeader):
		return bad("--admin-auth-header %q is not a header name; use one such as X-Forwarded-User", o.authHeader)
	case o.writable && !hasToken && o.authHeader == "":
		return bad("--admin-writable lets any caller delete DEAD messages; give a token (--admin-token-file FILE or OUTBOX_ADMIN_TOKEN) or --admin-auth-header as well")
	}
	if err := checkAddr(flag, o.addr); err != nil {
		return bad("%v", err)
	}
	if !hasToken && o.authHeader == "" && !o.insecure && !isLoopback(o.addr) {
		return bad("--%s %s would serve message payloads to anyone who reaches it: give a token (--admin-token-file FILE, "+
			"or OUTBOX_ADMIN_TOKEN), put it behind an authenticating proxy (--admin-auth-header X-Forwarded-User), "+
			"listen on a loopback address (127.0.0.1:PORT), or say --admin-insecure", flag, o.addr)
	}
	// The token file is read before anything listens, so that a bad one
	// fails the start at once.
	var err error
	o.loaded, err = o.tokens()
	return err
}

func validHeaderName(s string) bool {
	ok := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
	}
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return !ok(r) })
}

// isLoopback reports whether addr's host is a loopback address or
// "localhost"; an empty host is every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tokens returns the tokens of --admin-token and --admin-token-file, each
// registered as a secret for the logs.
func (o *adminOptions) tokens() ([]console.Token, error) {
	var out []console.Token
	if o.token != "" {
		out = append(out, console.Token{Name: "token", Secret: o.token})
	}
	if o.tokenFile == "" {
		return out, nil
	}
	fh, err := os.Open(o.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("--admin-token-file %s: %w", o.tokenFile, cli.UnwrapAll(err))
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, secret, named := strings.Cut(line, " ")
		if !named {
			name, secret = fmt.Sprintf("token-%d", n), line
		}
		secret = strings.TrimSpace(secret)
		cli.AddSecret(secret)
		if len(secret) < 16 {
			return nil, fmt.Errorf("--admin-token-file %s: the token on line %d is %d characters long; give 16 or more", o.tokenFile, n, len(secret))
		}
		out = append(out, console.Token{Name: name, Secret: secret})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--admin-token-file %s: %w", o.tokenFile, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--admin-token-file %s holds no token; write one a line", o.tokenFile)
	}
	return out, nil
}

// serveAdmin serves the console at / and the admin handler (package admin)
// at /admin/ on s, both behind the console's access rules. It returns the
// console, to be given to the relays as a hook and run for its backlog
// samples.
func serveAdmin(s *httpServer, store outboxdriver.Store, o *adminOptions, log *slog.Logger) (*console.Console, error) {
	tokens := o.loaded
	con, err := console.New(console.Config{Store: store, Writable: o.writable, Tokens: tokens, AuthHeader: o.authHeader,
		Unauthenticated: len(tokens) == 0 && o.authHeader == "", Logger: log, MaxInFlight: adminInFlight / 2, SampleEvery: o.sampleEvery})
	if err != nil {
		return nil, err
	}
	api, err := admin.NewHandler(admin.Config{Store: store, Writable: o.writable, Logger: log, MaxInFlight: adminInFlight / 2})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/", con.Protect(http.StripPrefix("/admin", http.MaxBytesHandler(api, 1<<20))))
	mux.Handle("/", http.MaxBytesHandler(con, 1<<20))
	s.start(mux, log, "serving the console", "/")
	log.Info("serving the admin API", "url", "http://"+s.ln.Addr().String()+"/admin/stats")
	switch {
	case o.authHeader != "":
		log.Info("the console trusts the proxy's header for who is calling", "header", o.authHeader)
	case len(tokens) == 0:
		log.Warn("the console and the admin API serve message payloads without a token", "addr", o.addr,
			"why", map[bool]string{true: "--admin-insecure", false: "loopback address"}[o.insecure])
	}
	if o.writable {
		log.Info("the console and the admin API can retry and drop DEAD messages (--admin-writable)")
	}
	return con, nil
}

// runConsoleSampler runs the console's backlog samples until ctx ends.
func runConsoleSampler(ctx context.Context, con *console.Console) {
	go func() { _ = con.Run(ctx) }()
}

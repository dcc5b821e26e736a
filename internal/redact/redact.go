// Package redact hides the credentials that URLs and DSNs carry, so that a
// log line, an error or a stored last_error can quote them. Every adapter
// and the command use it: a secret is masked the same way wherever it is
// printed.
//
// What is masked, with [Mask]:
//
//   - the password of a URL's userinfo (user:password@host), whatever
//     characters it holds, unless it is the placeholder "pass" or
//     "password" of an example;
//   - a user name without a password (token@host), which NATS, and many
//     HTTP services, read as a token; it is kept for the schemes whose user
//     part is a user name (postgres, postgresql, mysql, amqp, amqps, kafka,
//     mqtt, mqtts);
//   - the value of every query or fragment parameter whose name looks
//     secret (see [SecretParam]), such as ?token= or ?api_key=;
//   - the password of a go-sql-driver DSN (user:password@tcp(host)/db).
//
// The userinfo ends at the last "@" of a URL, so a password holding an
// unencoded "/", "?", "#", "@" or ":" is masked whole. The price is that a
// URL with an "@" in its path or query (https://host/users/@me) shows
// everything before that "@" masked.
package redact

import (
	"net/url"
	"strings"
)

// Mask replaces each secret.
const Mask = "xxxxx"

// nameSchemes are the schemes whose user part, without a password, is a
// user name rather than a token.
var nameSchemes = map[string]bool{
	"postgres": true, "postgresql": true, "mysql": true, "amqp": true, "amqps": true,
	"kafka": true, "mqtt": true, "mqtts": true,
}

// placeholders are the passwords of the examples that messages give, such
// as postgres://user:pass@host:5432/db; they are no secret, and masking
// them would make the example read wrong.
var placeholders = map[string]bool{"pass": true, "password": true, Mask: true}

// URL returns s, one URL, a comma-separated list of URLs (as NATS takes), a
// relative reference (/path?token=...) or a go-sql-driver DSN, with its
// credentials masked. A string that holds an
// "@" but no "://" is masked up to its last "@" (keeping a go-sql-driver
// DSN's user name), since its credentials cannot be told apart.
func URL(s string) string {
	if strings.Contains(s, "://") {
		return Text(s)
	}
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return maskParams(s, false) // a relative reference: /path?token=...
	}
	if !isDriverDSNTail(s[at+1:]) {
		return Mask + maskParams(s[at:], strings.ContainsAny(s[:at], "?#"))
	}
	user, password, hasPassword := strings.Cut(s[:at], ":")
	switch {
	case strings.ContainsAny(user, "/?#"):
		return Mask + maskParams(s[at:], false)
	case hasPassword && !placeholders[password]:
		return user + ":" + Mask + maskParams(s[at:], false)
	}
	return maskParams(s, false) // a user name alone
}

// Text returns s with the credentials of every URL and go-sql-driver DSN in
// it masked. A URL ends at white space, a quote, '<', '>' or the start of
// the next URL; trailing punctuation (".,;:)]}") is not part of it.
func Text(s string) string {
	if !strings.Contains(s, "://") && !strings.Contains(s, "@") {
		return s
	}
	s = maskDriverDSNs(s)
	starts := urlStarts(s)
	if len(starts) == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	prev := 0
	for i, start := range starts {
		end := len(s)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		if d := strings.IndexAny(s[start:end], " \t\r\n\"'`<>"); d >= 0 {
			end = start + d
		}
		span := s[start:end]
		trimmed := strings.TrimRight(span, ".,;:)]}")
		b.WriteString(s[prev:start])
		b.WriteString(redactURL(trimmed))
		b.WriteString(span[len(trimmed):])
		prev = end
	}
	b.WriteString(s[prev:])
	return b.String()
}

// urlStarts returns where each "scheme://" of s begins.
func urlStarts(s string) []int {
	var starts []int
	for off := 0; ; {
		i := strings.Index(s[off:], "://")
		if i < 0 {
			return starts
		}
		i += off
		start := i
		for start > 0 && isSchemeChar(s[start-1]) {
			start--
		}
		// A scheme starts with a letter.
		for start < i && !isLetter(s[start]) {
			start++
		}
		if start < i {
			starts = append(starts, start)
		}
		off = i + 3
	}
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isSchemeChar(c byte) bool {
	return isLetter(c) || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'
}

// redactURL masks the credentials of one URL, "scheme://...".
func redactURL(u string) string {
	i := strings.Index(u, "://")
	scheme, rest := strings.ToLower(u[:i]), u[i+3:]
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return u[:i+3] + maskParams(rest, false)
	}
	userinfo, tail := rest[:at], rest[at:]
	if strings.ContainsAny(userinfo, "/?#") {
		// The "@" is past the host, so either the password holds a
		// character that ends the authority, or the path or query holds
		// an "@". Neither can be told from the other: mask it all, and
		// the parameters after the "@", in case it stood in the query.
		return u[:i+3] + Mask + maskParams(tail, strings.ContainsAny(userinfo, "?#"))
	}
	user, password, hasPassword := strings.Cut(userinfo, ":")
	switch {
	case hasPassword && placeholders[password]:
		// user:pass@host, an example in a message.
	case hasPassword:
		userinfo = user + ":" + Mask
	case !nameSchemes[scheme]:
		userinfo = Mask
	}
	return u[:i+3] + userinfo + maskParams(tail, false)
}

// maskParams masks the values of the secret parameters in the query and
// fragment of s, the part of a URL after its scheme. With inQuery, s starts
// inside a query, and its parameters begin at the first '&'.
func maskParams(s string, inQuery bool) string {
	q := strings.IndexAny(s, "?#")
	if inQuery {
		if a := strings.IndexByte(s, '&'); a >= 0 && (q < 0 || a < q) {
			q = a
		}
	}
	if q < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:q+1])
	params := s[q+1:]
	for len(params) > 0 {
		end := strings.IndexAny(params, "&;#?")
		pair := params
		if end >= 0 {
			pair = params[:end]
		}
		name, value, ok := strings.Cut(pair, "=")
		if ok && value != "" && SecretParam(decodeName(name)) {
			pair = name + "=" + Mask
		}
		b.WriteString(pair)
		if end < 0 {
			break
		}
		b.WriteByte(params[end])
		params = params[end+1:]
	}
	return b.String()
}

func decodeName(name string) string {
	if d, err := url.QueryUnescape(name); err == nil {
		return d
	}
	// Undecodable: judge the name by what can be read of it.
	return strings.ReplaceAll(name, "%", "")
}

// SecretParam reports whether a query parameter of this name holds a secret:
// key, apikey, sig, pass, pwd, auth, authorization, jwt, bearer,
// credential(s), names that contain token, secret, passw, signature,
// credential or apikey (access_token, client_secret, password...), and
// names that end in _key, _auth, _sig, _pass or _pwd (api_key,
// private_key...), but not routing_key, binding_key or partition_key.
// Case, '-' and '.' do not matter.
func SecretParam(name string) bool {
	n := strings.NewReplacer("-", "_", ".", "_", " ", "_").Replace(strings.ToLower(strings.TrimSpace(name)))
	switch n {
	case "key", "apikey", "sig", "pass", "pwd", "auth", "authorization", "jwt", "bearer", "credential", "credentials":
		return true
	case "routing_key", "binding_key", "partition_key":
		return false
	}
	for _, part := range []string{"token", "secret", "passw", "signature", "credential", "apikey"} {
		if strings.Contains(n, part) {
			return true
		}
	}
	for _, suffix := range []string{"_key", "_auth", "_sig", "_pass", "_pwd"} {
		if strings.HasSuffix(n, suffix) {
			return true
		}
	}
	return false
}

// driverNets are the networks of a go-sql-driver DSN's address,
// user:password@net(address)/db.
var driverNets = []string{"@tcp(", "@tcp4(", "@tcp6(", "@unix(", "@udp("}

func isDriverDSNTail(s string) bool {
	for _, n := range driverNets {
		if strings.HasPrefix(s, n[1:]) {
			return true
		}
	}
	return false
}

// maskDriverDSNs masks the password of every go-sql-driver DSN in s, which
// ends at the last ':' before "@tcp(" and starts after the last white space
// or quote before that; the password runs from the first ':' of the DSN.
func maskDriverDSNs(s string) string {
	for _, n := range driverNets {
		for off := 0; ; {
			i := strings.Index(s[off:], n)
			if i < 0 {
				break
			}
			i += off
			start := strings.LastIndexAny(s[:i], " \t\r\n\"'`<>=") + 1
			if c := strings.IndexByte(s[start:i], ':'); c >= 0 && !strings.Contains(s[start:i], "://") && !placeholders[s[start+c+1:i]] {
				c += start
				s = s[:c+1] + Mask + s[i:]
				i = c + 1 + len(Mask)
			}
			off = i + len(n)
		}
	}
	return s
}

// Secrets returns the credentials that the URL, URL list or go-sql-driver
// DSN raw holds: passwords, tokens and the values of secret parameters,
// each as written and percent-decoded, so that a caller can mask them in
// text that quotes them in either form. Values shorter than 3 characters
// are left out: masking them would mask common words.
func Secrets(raw string) []string {
	var out []string
	add := func(s string) {
		if len(s) < 3 || placeholders[s] {
			return
		}
		out = append(out, s)
		if d, err := url.PathUnescape(s); err == nil && d != s && len(d) >= 3 {
			out = append(out, d)
		}
		if d, err := url.QueryUnescape(s); err == nil && d != s && len(d) >= 3 {
			out = append(out, d)
		}
	}
	if !strings.Contains(raw, "://") {
		if at := strings.LastIndexByte(raw, '@'); at >= 0 {
			if _, pw, ok := strings.Cut(raw[:at], ":"); ok {
				add(pw)
			} else if !isDriverDSNTail(raw[at+1:]) {
				add(raw[:at])
			}
		}
		return out
	}
	starts := urlStarts(raw)
	for k, start := range starts {
		end := len(raw)
		if k+1 < len(starts) {
			end = starts[k+1]
		}
		u := strings.TrimRight(raw[start:end], ",")
		i := strings.Index(u, "://")
		scheme, rest := strings.ToLower(u[:i]), u[i+3:]
		query := rest
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			userinfo := rest[:at]
			query = rest[at:]
			if user, pw, ok := strings.Cut(userinfo, ":"); ok {
				if strings.ContainsAny(user, "/?#") {
					add(userinfo)
				} else {
					add(pw)
					// A parser that ends the authority at one of these
					// quotes the password up to it.
					if cut := strings.IndexAny(pw, "/?#@"); cut >= 0 {
						add(pw[:cut])
					}
				}
			} else if !nameSchemes[scheme] || strings.ContainsAny(userinfo, "/?#") {
				add(userinfo)
			}
		}
		q := strings.IndexAny(query, "?#")
		if q < 0 {
			continue
		}
		for _, pair := range strings.FieldsFunc(query[q+1:], func(r rune) bool { return r == '&' || r == ';' || r == '#' || r == '?' }) {
			if name, value, ok := strings.Cut(pair, "="); ok && SecretParam(decodeName(name)) {
				add(value)
			}
		}
	}
	return out
}

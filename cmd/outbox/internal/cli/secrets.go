package cli

import (
	"errors"
	"net/url"
	"strings"
	"sync"

	"github.com/outbox-go/outbox/internal/redact"
)

// RedactDSN returns dsn, a URL or a go-sql-driver DSN, with its password
// and tokens masked (package redact).
func RedactDSN(dsn string) string { return redact.URL(dsn) }

// secrets are the passwords and keys this process was given; every message
// printed passes through redact, in case a library quoted one.
var secrets struct {
	sync.Mutex
	list []string
}

// AddSecret adds s, and its URL-escaped forms, to the secrets Scrub masks.
// A secret of one or two letters is ignored.
func AddSecret(s string) {
	if len(s) < 3 { // a one- or two-letter password would redact every word
		return
	}
	secrets.Lock()
	defer secrets.Unlock()
	secrets.list = append(secrets.list, s)
	if esc := url.QueryEscape(s); esc != s {
		secrets.list = append(secrets.list, esc)
	}
	if esc := url.PathEscape(s); esc != s {
		secrets.list = append(secrets.list, esc)
	}
}

// AddURLSecret adds the passwords, tokens and secret parameter values of
// raw, a URL, a list of them or a go-sql-driver DSN, even one that does not
// parse.
func AddURLSecret(raw string) {
	for _, s := range redact.Secrets(raw) {
		AddSecret(s)
	}
}

// Scrub replaces every known secret in msg with "xxxxx", and masks the
// credentials of every URL and DSN it quotes (package redact).
func Scrub(msg string) string {
	secrets.Lock()
	for _, s := range secrets.list {
		msg = strings.ReplaceAll(msg, s, redact.Mask)
	}
	secrets.Unlock()
	return redact.Text(msg)
}

// UnwrapAll returns the innermost error of a chain, whose text does not repeat
// the (possibly secret) input the outer layers quote.
func UnwrapAll(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

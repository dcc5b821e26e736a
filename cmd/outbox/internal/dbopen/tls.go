package dbopen

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// TLS is what --db-tls-ca, --db-tls-cert, --db-tls-key and
// --db-tls-server-name ask of the database connection. The zero value asks
// for nothing: the DSN's own settings apply.
type TLS struct {
	CA, Cert, Key, ServerName string
}

// Set reports whether t asks for anything.
func (t TLS) Set() bool { return t != TLS{} }

// The PostgreSQL sslmodes that may end in a connection in plain text.
var pgPlainModes = map[string]bool{"disable": true, "allow": true, "prefer": true}

// postgresTLS returns dsn, a postgres:// URL, with the files of t as its
// sslrootcert, sslcert and sslkey, and sslmode=verify-full unless the DSN
// sets an sslmode. A DSN that sets a parameter a flag sets too, or an sslmode
// that could fall back to plain text, is refused.
func postgresTLS(dsn string, t TLS) (string, error) {
	if !t.Set() {
		return dsn, nil
	}
	if (t.Cert == "") != (t.Key == "") {
		return "", errors.New("--db-tls-cert and --db-tls-key go together: give both, or neither")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("invalid postgres --db: %s; the form is postgres://user:pass@host:5432/db", cli.Scrub(cli.UnwrapAll(err).Error()))
	}
	q := u.Query()
	for _, p := range [][2]string{{"sslrootcert", t.CA}, {"sslcert", t.Cert}, {"sslkey", t.Key}} {
		if p[1] == "" {
			continue
		}
		if q.Has(p[0]) {
			return "", fmt.Errorf("--db sets %s and --db-tls-%s is given too; keep one", p[0], pgFlag[p[0]])
		}
		q.Set(p[0], p[1])
	}
	switch mode := q.Get("sslmode"); {
	case !q.Has("sslmode"):
		q.Set("sslmode", "verify-full")
	case pgPlainModes[mode]:
		return "", fmt.Errorf("--db-tls-* ask for TLS, but the --db sslmode=%s may connect in plain text; use sslmode=verify-full (the default with --db-tls-*), verify-ca or require", mode)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

var pgFlag = map[string]string{"sslrootcert": "ca", "sslcert": "cert", "sslkey": "key"}

// checkPostgresTLS sets --db-tls-server-name on cfg and makes sure that,
// when TLS was asked for (by a flag or the DSN's sslmode), no connection
// cfg may make is in plain text.
func checkPostgresTLS(cfg *pgconn.Config, t TLS, asked bool) error {
	if !asked {
		return nil
	}
	tlsConfigs := []*tls.Config{cfg.TLSConfig}
	for _, fb := range cfg.Fallbacks {
		tlsConfigs = append(tlsConfigs, fb.TLSConfig)
	}
	for _, c := range tlsConfigs {
		if c == nil {
			return errors.New("--db: TLS was asked for, but a connection could be made in plain text; use sslmode=verify-full, verify-ca or require")
		}
		if t.ServerName != "" {
			c.ServerName = t.ServerName
		}
	}
	return nil
}

// postgresAsksTLS reports whether dsn's sslmode forbids plain text.
func postgresAsksTLS(dsn string) bool {
	u, err := url.Parse(dsn)
	if err != nil {
		return false
	}
	mode := u.Query().Get("sslmode")
	return mode != "" && !pgPlainModes[mode]
}

// The parameters of a mysql:// URL that configure TLS, with the names the
// broker URLs use; the driver does not see them.
var mysqlTLSParams = [...]string{"tls_ca", "tls_cert", "tls_key", "tls_server_name"}

// mysqlTLS merges the TLS parameters of a mysql:// URL's query q (removing
// them from q) with the flags of t. A setting given both ways is refused.
func mysqlTLS(q url.Values, t TLS) (TLS, error) {
	fields := []*string{&t.CA, &t.Cert, &t.Key, &t.ServerName}
	for i, name := range mysqlTLSParams {
		if !q.Has(name) {
			continue
		}
		v := q.Get(name)
		q.Del(name)
		if *fields[i] != "" {
			return t, fmt.Errorf("--db sets %s and --db-%s is given too; keep one", name, strings.ReplaceAll(name, "_", "-"))
		}
		*fields[i] = v
	}
	return t, nil
}

// tlsConfig builds the client configuration of t: the server's certificate
// verified against the CA file's certificates (the system's when there is
// none) and for the server name (the host's when there is none), and the
// client certificate, when one is given. what names the settings in errors,
// e.g. "--db-tls".
func (t TLS) Config(what string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("%s-ca: %v", what, cli.UnwrapAll(err))
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s-ca %s holds no PEM certificate; give the CA's certificate in PEM (-----BEGIN CERTIFICATE-----)", what, t.CA)
		}
	}
	switch {
	case t.Cert != "" && t.Key != "":
		pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("%s-cert %s and %s-key %s: %v", what, t.Cert, what, t.Key, err)
		}
		c.Certificates = []tls.Certificate{pair}
	case t.Cert != "" || t.Key != "":
		return nil, fmt.Errorf("%s-cert and %s-key go together: give both, or neither", what, what)
	}
	return c, nil
}

// tlsHint is what to check after a connection failed on msg, when the
// failure was the TLS handshake's.
func tlsHint(msg string) string {
	switch {
	case strings.Contains(msg, "x509: certificate signed by unknown authority"):
		return "; the server's certificate is not signed by a CA in --db-tls-ca (or the DSN's sslrootcert, tls_ca)"
	case strings.Contains(msg, "x509: certificate has expired"):
		return "; the server's certificate has expired (or is not valid yet): renew it, or check the clocks of this host and the server"
	case strings.Contains(msg, "x509: certificate is valid for"), strings.Contains(msg, "x509: certificate is not valid for"),
		strings.Contains(msg, "because it doesn't contain any IP SANs"):
		return "; the server's certificate names another host: connect by that name, or set --db-tls-server-name"
	case strings.Contains(msg, "remote error: tls:"):
		return "; the server refused this client's certificate: check --db-tls-cert and --db-tls-key"
	}
	return ""
}

package brokerconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"os"
	"time"
)

// The TLS query parameters every broker URL and the webhook accept.
const (
	ParamTLSCA         = "tls_ca"          // PEM file of the CAs that sign the server's certificate
	ParamTLSCert       = "tls_cert"        // PEM file of the client certificate
	ParamTLSKey        = "tls_key"         // PEM file of the client certificate's key
	ParamTLSServerName = "tls_server_name" // name checked in the server's certificate
)

// TLSParams lists the TLS query parameters.
var TLSParams = []string{ParamTLSCA, ParamTLSCert, ParamTLSKey, ParamTLSServerName}

// TLSFiles names the files and the server name of a TLS connection, as the
// TLS parameters of a URL or the command line give them.
type TLSFiles struct {
	CA         string // CA certificates, PEM; empty: the system's roots
	Cert, Key  string // client certificate and key, PEM; both or neither
	ServerName string // empty: the host of the URL
}

// IsZero reports whether no file and no server name is set.
func (f TLSFiles) IsZero() bool { return f == TLSFiles{} }

// TLSFiles reads the TLS parameters; aliases, when given, maps a parameter
// name to another name that means the same (RabbitMQ's cacertfile for
// tls_ca). Set fields of dst are kept.
func (q *Query) TLSFiles(dst *TLSFiles, aliases map[string]string) {
	alias := func(name string) []string {
		if a, ok := aliases[name]; ok {
			return []string{name, a}
		}
		return []string{name}
	}
	q.String(&dst.CA, alias(ParamTLSCA)...)
	q.String(&dst.Cert, alias(ParamTLSCert)...)
	q.String(&dst.Key, alias(ParamTLSKey)...)
	q.String(&dst.ServerName, alias(ParamTLSServerName)...)
}

// Config loads the files into a TLS configuration (TLS 1.2 or later). A
// missing or unreadable file, a file without a certificate, a certificate
// without its key and a client certificate that has expired are errors of
// errf that name the parameter and the file, never the key's content.
func (f TLSFiles) Config(errf func(format string, args ...any) error) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, errf("%s %q cannot be read: %s", ParamTLSCA, f.CA, fileReason(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errf("%s %q holds no PEM certificate; give the CA certificate(s) that sign the server's certificate", ParamTLSCA, f.CA)
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.Cert == "" && f.Key == "":
	case f.Cert == "" || f.Key == "":
		return nil, errf("%s and %s go together: give both the client certificate and its key, or neither", ParamTLSCert, ParamTLSKey)
	default:
		if err := f.loadPair(cfg, errf); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func (f TLSFiles) loadPair(cfg *tls.Config, errf func(format string, args ...any) error) error {
	for _, p := range [][2]string{{ParamTLSCert, f.Cert}, {ParamTLSKey, f.Key}} {
		if _, err := os.Stat(p[1]); err != nil {
			return errf("%s %q cannot be read: %s", p[0], p[1], fileReason(err))
		}
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		// The error of crypto/tls names the problem (no PEM block, a key
		// that does not match), never the key's bytes.
		return errf("%s %q with %s %q: %v", ParamTLSCert, f.Cert, ParamTLSKey, f.Key, err)
	}
	if leaf := pair.Leaf; leaf != nil {
		now := time.Now()
		if now.After(leaf.NotAfter) {
			return errf("%s %q expired on %s; renew the client certificate", ParamTLSCert, f.Cert, leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		if now.Before(leaf.NotBefore) {
			return errf("%s %q is not valid before %s; check the clock or the certificate", ParamTLSCert, f.Cert, leaf.NotBefore.UTC().Format(time.RFC3339))
		}
	}
	cfg.Certificates = []tls.Certificate{pair}
	return nil
}

func fileReason(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "no such file"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// ResolveTLS returns the TLS configuration a connection uses: cfg when the
// caller set one (a config field wins over the URL, and is cloned so that
// the adapter may set ServerName), else the files' configuration when any
// is named, else nil. want says that the URL asks for TLS (amqps://,
// rediss://, ...): with neither cfg nor files it gets the system's roots.
func ResolveTLS(cfg *tls.Config, files TLSFiles, want bool, errf func(format string, args ...any) error) (*tls.Config, error) {
	if cfg != nil {
		c := cfg.Clone()
		if c.ServerName == "" {
			c.ServerName = files.ServerName
		}
		return c, nil
	}
	if files.IsZero() && !want {
		return nil, nil
	}
	return files.Config(errf)
}

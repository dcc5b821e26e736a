package testbroker

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
)

// RedisTLS starts a redis-server that listens with TLS only (--port 0),
// with the PKI's server certificate. With requireClient, clients must show
// a certificate of the CA. extra is appended to the command line (e.g.
// "--user", "alice", "on", ">secret", "~*", "&*", "+@all").
func RedisTLS(t testing.TB, p *PKI, requireClient bool, extra ...string) *Server {
	t.Helper()
	dir, port := t.TempDir(), FreePort(t)
	auth := "no"
	if requireClient {
		auth = "yes"
	}
	args := []string{"--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", p.ServerCert, "--tls-key-file", p.ServerKey, "--tls-ca-cert-file", p.CA,
		"--tls-auth-clients", auth, "--save", "", "--appendonly", "no", "--dir", dir}
	return Start(t, Spec{Name: "redis-server", Args: append(args, extra...), Port: port, Dir: dir})
}

// Redis starts a plain redis-server; extra is appended to its command line.
func Redis(t testing.TB, extra ...string) *Server {
	t.Helper()
	dir, port := t.TempDir(), FreePort(t)
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
	return Start(t, Spec{Name: "redis-server", Args: append(args, extra...), Port: port, Dir: dir})
}

// NATS starts a nats-server with JetStream; conf is added to its
// configuration file (a tls block, an authorization block).
func NATS(t testing.TB, conf string) *Server {
	t.Helper()
	dir, port := t.TempDir(), FreePort(t)
	file := WriteFile(t, dir, "nats.conf", fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\n%s\n", port, filepath.Join(dir, "js"), conf))
	return Start(t, Spec{Name: "nats-server", Args: []string{"-c", file}, Port: port, Dir: dir})
}

// NATSTLS is the tls block of a nats-server that verifies clients'
// certificates when requireClient is set.
func NATSTLS(p *PKI, requireClient bool) string {
	return fmt.Sprintf("tls { cert_file: %q\n key_file: %q\n ca_file: %q\n verify: %t\n timeout: 5 }\n", p.ServerCert, p.ServerKey, p.CA, requireClient)
}

// MosquittoTLS starts a mosquitto whose only listener takes TLS with the
// PKI's server certificate; with requireClient, clients must show a
// certificate of the CA. extra is appended to its configuration.
func MosquittoTLS(t testing.TB, p *PKI, requireClient bool, extra string) *Server {
	t.Helper()
	dir, port := t.TempDir(), FreePort(t)
	conf := fmt.Sprintf("listener %d 127.0.0.1\nuser root\nallow_anonymous true\ncafile %s\ncertfile %s\nkeyfile %s\nrequire_certificate %t\nlog_dest file %s\n%s\n",
		port, p.CA, p.ServerCert, p.ServerKey, requireClient, filepath.Join(dir, "mosquitto.log"), extra)
	file := WriteFile(t, dir, "mosquitto.conf", conf)
	return Start(t, Spec{Name: "mosquitto", Args: []string{"-c", file}, Port: port, Dir: dir, Log: "mosquitto.log"})
}

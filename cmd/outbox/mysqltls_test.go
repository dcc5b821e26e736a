package main

import (
	"database/sql"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/clitest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tlsMariaDB is a private MariaDB server with require_secure_transport=ON
// and a certificate for mariadb.outbox.test and localhost from a CA the
// test made.
type tlsMariaDB struct {
	port     int
	dir      string
	ca       *testCA
	password string // of the user app
}

func startTLSMariaDB(t *testing.T) *tlsMariaDB {
	t.Helper()
	base := t.TempDir()
	s := &tlsMariaDB{port: freePort(t), dir: base, password: "my-" + clitest.UniqueName()}
	s.ca = newTestCA(t, base, "outbox-test-ca")
	s.ca.issue(t, base, "server", certSpec{cn: "mariadb.outbox.test", dns: []string{"mariadb.outbox.test", "localhost"}})
	data := filepath.Join(base, "data")
	install := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+data, "--user="+currentUser(),
		"--auth-root-authentication-method=normal", "--skip-test-db")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("the TLS test needs mariadb-install-db (apt-get install mariadb-server): %v\n%s", err, out)
	}
	cmd := exec.Command("mariadbd", "--no-defaults", "--datadir="+data, "--user="+currentUser(),
		fmt.Sprintf("--port=%d", s.port), "--bind-address=127.0.0.1", "--socket="+s.socket(),
		"--pid-file="+filepath.Join(base, "mariadb.pid"), "--log-error="+filepath.Join(base, "error.log"),
		"--skip-log-bin", "--innodb-buffer-pool-size=16M", "--skip-name-resolve",
		"--ssl-ca="+s.ca.pemPath, "--ssl-cert="+filepath.Join(base, "server.crt"), "--ssl-key="+filepath.Join(base, "server.key"),
		"--require-secure-transport=ON")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start mariadbd: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	db := s.socketDB(t)
	waitFor(t, "the private MariaDB", 60*time.Second, func() bool { return db.Ping() == nil })
	for _, q := range []string{
		"CREATE DATABASE app",
		"CREATE USER app@'%' IDENTIFIED BY '" + s.password + "'",
		"GRANT ALL ON app.* TO app@'%'",
		"CREATE USER certuser@'%' REQUIRE X509",
		"GRANT ALL ON app.* TO certuser@'%'",
	} {
		if _, err := db.Exec(q); err != nil {
			log, _ := os.ReadFile(filepath.Join(base, "error.log"))
			t.Fatalf("%s: %v\n%s", q, err, log)
		}
	}
	return s
}

func currentUser() string {
	if os.Geteuid() == 0 {
		return "root"
	}
	return os.Getenv("USER")
}

func (s *tlsMariaDB) socket() string { return filepath.Join(s.dir, "mariadb.sock") }

// socketDB connects as root over the Unix socket, which
// require_secure_transport counts as secure.
func (s *tlsMariaDB) socketDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", "root@unix("+s.socket()+")/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func (s *tlsMariaDB) dsn(host, user string, params url.Values) string {
	auth := user
	if user == "app" {
		auth += ":" + s.password
	}
	d := fmt.Sprintf("mysql://%s@%s:%d/app", auth, host, s.port)
	if len(params) > 0 {
		d += "?" + params.Encode()
	}
	return d
}

// TestMySQLTLS runs the binary against a MariaDB server that refuses
// connections in plain text: the tls_* parameters and the --db-tls-* flags,
// a client certificate, the server name, and the clear errors of a wrong
// CA, a wrong name and an expired certificate, without the password.
func TestMySQLTLS(t *testing.T) {
	t.Parallel()
	s := startTLSMariaDB(t)
	dir := t.TempDir()
	client, clientKey := s.ca.issue(t, dir, "certuser", certSpec{cn: "certuser", client: true})
	other := newTestCA(t, dir, "another-ca")
	ca := url.Values{"tls_ca": {s.ca.pemPath}}

	ok := func(t *testing.T, env []string, args ...string) {
		t.Helper()
		if r := runCLI(t, env, args...); r.code != 0 {
			t.Fatalf("outbox %s: %s", strings.Join(args, " "), r)
		}
	}
	fails := func(t *testing.T, want string, env []string, args ...string) {
		t.Helper()
		r := runCLI(t, env, args...)
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Fatalf("outbox %s: want a failure saying %q: %s", strings.Join(args, " "), want, r)
		}
		if strings.Contains(r.stderr+r.stdout, s.password) {
			t.Fatalf("the password was printed: %s", r)
		}
	}

	ok(t, nil, "migrate", "--db", s.dsn("localhost", "app", ca))
	ok(t, []string{"OUTBOX_DB=" + s.dsn("localhost", "app", nil), "OUTBOX_DB_TLS_CA=" + s.ca.pemPath}, "stats")
	fails(t, "set --db-tls-server-name", nil, "stats", "--db", s.dsn("127.0.0.1", "app", ca))
	ok(t, nil, "stats", "--db", s.dsn("127.0.0.1", "app", url.Values{"tls_ca": {s.ca.pemPath}, "tls_server_name": {"mariadb.outbox.test"}}))
	ok(t, nil, "stats", "--db", s.dsn("127.0.0.1", "app", nil), "--db-tls-ca", s.ca.pemPath, "--db-tls-server-name", "mariadb.outbox.test")
	// certuser needs a certificate from the CA (REQUIRE X509).
	ok(t, nil, "stats", "--db", s.dsn("localhost", "certuser", url.Values{"tls_ca": {s.ca.pemPath}, "tls_cert": {client}, "tls_key": {clientKey}}))
	ok(t, nil, "stats", "--db", s.dsn("localhost", "certuser", nil), "--db-tls-ca", s.ca.pemPath, "--db-tls-cert", client, "--db-tls-key", clientKey)
	fails(t, "Access denied", nil, "stats", "--db", s.dsn("localhost", "certuser", ca))
	fails(t, "keep one", nil, "stats", "--db", s.dsn("localhost", "app", ca), "--db-tls-ca", s.ca.pemPath)
	fails(t, "drop tls=preferred", nil, "stats", "--db", s.dsn("localhost", "app", url.Values{"tls_ca": {s.ca.pemPath}, "tls": {"preferred"}}))

	// The server refuses plain text: the credentials that logged in over
	// TLS above are denied (MariaDB reports require_secure_transport so).
	fails(t, "Access denied", nil, "stats", "--db", s.dsn("localhost", "app", nil))
	fails(t, "not signed by a CA in --db-tls-ca", nil, "stats", "--db", s.dsn("localhost", "app", url.Values{"tls_ca": {other.pemPath}}))

	s.ca.issue(t, s.dir, "server", certSpec{cn: "mariadb.outbox.test", dns: []string{"localhost"}, expired: true})
	if _, err := s.socketDB(t).Exec("FLUSH SSL"); err != nil {
		t.Fatal(err)
	}
	fails(t, "has expired", nil, "stats", "--db", s.dsn("localhost", "app", ca))
}

// TestMySQLTLSNeverFallsBack asks the machine's MariaDB, which has no TLS,
// for TLS: the binary gives up instead of logging in in plain text.
func TestMySQLTLSNeverFallsBack(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, t.TempDir(), "ca")
	for _, args := range [][]string{
		{"--db", "mysql://root@127.0.0.1:3306/test?tls_ca=" + url.QueryEscape(ca.pemPath)},
		{"--db", "mysql://root@127.0.0.1:3306/test", "--db-tls-ca", ca.pemPath},
	} {
		r := runCLI(t, nil, append([]string{"stats"}, args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "TLS requested but server does not support TLS") {
			t.Fatalf("want the refusal of a server without TLS: %s", r)
		}
	}
}

package main

import (
	"database/sql"
	byteorder "encoding/binary"
	"fmt"
	"github.com/outbox-go/outbox/cmd/outbox/internal/clitest"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tlsPostgres is a private PostgreSQL cluster that takes TLS connections
// only (hostssl lines alone in pg_hba.conf), with a certificate for
// pg.outbox.test and localhost from a CA the test made.
type tlsPostgres struct {
	port     int
	dir      string // the cluster's files and its socket
	ca       *testCA
	password string // of the superuser postgres
	cmd      *exec.Cmd
	cred     *syscall.Credential
}

// pgBinDir finds the PostgreSQL server's programs (initdb, postgres).
func pgBinDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("OUTBOX_TEST_PG_BINDIR"); d != "" {
		return d
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); fileExists(filepath.Join(d, "initdb")) {
			return d
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if fileExists(filepath.Join(dirs[i], "initdb")) {
			return dirs[i]
		}
	}
	t.Fatal("the TLS test needs PostgreSQL's initdb and postgres (apt-get install postgresql, or set OUTBOX_TEST_PG_BINDIR)")
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// startTLSPostgres initialises and starts the cluster; the test's cleanup
// stops it. As root, the cluster runs as the user postgres, as PostgreSQL
// refuses to run as root.
func startTLSPostgres(t *testing.T) *tlsPostgres {
	t.Helper()
	bin := pgBinDir(t)
	base := t.TempDir()
	s := &tlsPostgres{port: freePort(t), dir: filepath.Join(base, "pg"), password: "pg-" + clitest.UniqueName()}
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s.ca = newTestCA(t, base, "outbox-test-ca")
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, the TLS test runs PostgreSQL as the user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// The user postgres must reach the cluster's directory.
		for _, d := range []string{filepath.Dir(base), base} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(s.dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	pw := filepath.Join(s.dir, "pwfile")
	s.writeFile(t, "pwfile", s.password+"\n")
	s.run(t, filepath.Join(bin, "initdb"), "-D", filepath.Join(s.dir, "data"), "-U", "postgres", "-E", "UTF8",
		"--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile="+pw, "--no-sync")
	s.setCert(t, certSpec{cn: "pg.outbox.test", dns: []string{"pg.outbox.test", "localhost"}})
	s.writeFile(t, "data/pg_hba.conf", "local all all trust\n"+
		"hostssl all certuser 127.0.0.1/32 cert\n"+
		"hostssl all all 127.0.0.1/32 scram-sha-256\n")
	conf, err := os.OpenFile(filepath.Join(s.dir, "data", "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conf, "\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n"+
		"ssl = on\nssl_cert_file = '%s'\nssl_key_file = '%s'\nssl_ca_file = '%s'\n"+
		"fsync = off\nshared_buffers = 16MB\nmax_connections = 30\n",
		s.port, s.dir, filepath.Join(s.dir, "server.crt"), filepath.Join(s.dir, "server.key"), filepath.Join(s.dir, "ca.crt"))
	conf.Close()
	ca, _ := os.ReadFile(s.ca.pemPath)
	s.writeFile(t, "ca.crt", string(ca))

	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", filepath.Join(s.dir, "data"))
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	logf, _ := os.Create(filepath.Join(base, "postgres.log"))
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
	})
	db := s.socketDB(t)
	waitFor(t, "the private PostgreSQL", 30*time.Second, func() bool { return db.Ping() == nil })
	for _, q := range []string{"CREATE ROLE certuser LOGIN", "CREATE DATABASE certdb OWNER certuser"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return s
}

// socketDB connects as postgres over the cluster's Unix socket, which
// pg_hba.conf trusts.
func (s *tlsPostgres) socketDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", s.dir, s.port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// writeFile writes name under the cluster's directory, owned by the user
// the cluster runs as, readable by it alone.
func (s *tlsPostgres) writeFile(t *testing.T, name, content string) {
	t.Helper()
	p := filepath.Join(s.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.cred != nil {
		if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
}

// setCert gives the server a new certificate from the test's CA.
func (s *tlsPostgres) setCert(t *testing.T, spec certSpec) {
	t.Helper()
	tmp := t.TempDir()
	crt, key := s.ca.issue(t, tmp, "server", spec)
	for src, dst := range map[string]string{crt: "server.crt", key: "server.key"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		s.writeFile(t, dst, string(b))
	}
}

// reload makes the server read its configuration and certificate again.
func (s *tlsPostgres) reload(t *testing.T) {
	t.Helper()
	if _, err := s.socketDB(t).Exec("SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the postmaster reloads on its own time
}

func (s *tlsPostgres) run(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", filepath.Base(name), err, out)
	}
}

func (s *tlsPostgres) dsn(host, user, db, query string) string {
	auth := user
	if user == "postgres" {
		auth += ":" + s.password
	}
	d := fmt.Sprintf("postgres://%s@%s:%d/%s", auth, host, s.port, db)
	if query != "" {
		d += "?" + query
	}
	return d
}

// TestPostgresTLS runs the binary against a cluster that takes TLS
// connections only: verify-full with the flags, the variables and the DSN's
// own parameters, a client certificate, the server name, and the clear
// errors of a wrong CA, a wrong name and an expired certificate, none of
// which prints the password.
func TestPostgresTLS(t *testing.T) {
	t.Parallel()
	s := startTLSPostgres(t)
	dir := t.TempDir()
	client, clientKey := s.ca.issue(t, dir, "certuser", certSpec{cn: "certuser", client: true})
	other := newTestCA(t, dir, "another-ca")
	byName := s.dsn("localhost", "postgres", "postgres", "")
	byIP := s.dsn("127.0.0.1", "postgres", "postgres", "")

	ok := func(t *testing.T, env []string, args ...string) result {
		t.Helper()
		r := runCLI(t, env, args...)
		if r.code != 0 {
			t.Fatalf("outbox %s: %s", strings.Join(args, " "), r)
		}
		return r
	}
	fails := func(t *testing.T, want string, env []string, args ...string) result {
		t.Helper()
		r := runCLI(t, env, args...)
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Fatalf("outbox %s: want a failure saying %q: %s", strings.Join(args, " "), want, r)
		}
		if strings.Contains(r.stderr+r.stdout, s.password) {
			t.Fatalf("the password was printed: %s", r)
		}
		return r
	}

	ok(t, nil, "migrate", "--db", byName, "--db-tls-ca", s.ca.pemPath)
	ok(t, []string{"OUTBOX_DB=" + byName, "OUTBOX_DB_TLS_CA=" + s.ca.pemPath}, "stats")
	ok(t, nil, "stats", "--db", s.dsn("localhost", "postgres", "postgres", "sslmode=verify-full&sslrootcert="+s.ca.pemPath))
	// By IP the certificate's names do not match, unless the server name says which to expect.
	fails(t, "set --db-tls-server-name", nil, "stats", "--db", byIP, "--db-tls-ca", s.ca.pemPath)
	ok(t, nil, "stats", "--db", byIP, "--db-tls-ca", s.ca.pemPath, "--db-tls-server-name", "pg.outbox.test")
	// A client certificate: certuser logs in with it alone.
	certDSN := s.dsn("localhost", "certuser", "certdb", "")
	ok(t, nil, "migrate", "--db", certDSN, "--db-tls-ca", s.ca.pemPath, "--db-tls-cert", client, "--db-tls-key", clientKey)
	fails(t, "certificate", nil, "stats", "--db", certDSN, "--db-tls-ca", s.ca.pemPath)
	fails(t, "go together", nil, "stats", "--db", certDSN, "--db-tls-cert", client)

	// The server takes no connection in plain text, and a client that asks
	// for TLS refuses to ask for less.
	fails(t, "no pg_hba.conf entry", nil, "stats", "--db", s.dsn("localhost", "postgres", "postgres", "sslmode=disable"))
	fails(t, "may connect in plain text", nil, "stats", "--db", s.dsn("localhost", "postgres", "postgres", "sslmode=prefer"), "--db-tls-ca", s.ca.pemPath)
	fails(t, "keep one", nil, "stats", "--db", s.dsn("localhost", "postgres", "postgres", "sslrootcert=/x"), "--db-tls-ca", s.ca.pemPath)

	fails(t, "not signed by a CA in --db-tls-ca", nil, "stats", "--db", byName, "--db-tls-ca", other.pemPath)
	s.setCert(t, certSpec{cn: "pg.outbox.test", dns: []string{"localhost"}, expired: true})
	s.reload(t)
	fails(t, "has expired", nil, "stats", "--db", byName, "--db-tls-ca", s.ca.pemPath)
}

// TestPostgresTLSNeverFallsBack runs the binary against a server that
// declines TLS, as one with ssl=off does: asked for TLS, the binary gives
// up without sending its startup message in plain text.
func TestPostgresTLSNeverFallsBack(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	plain := make(chan int, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				var req [8]byte
				if _, err := io.ReadFull(c, req[:]); err != nil {
					return
				}
				if byteorder.BigEndian.Uint32(req[4:]) != 80877103 { // not an SSLRequest: plain text
					plain <- 1
					return
				}
				_, _ = c.Write([]byte{'N'})
				if n, _ := c.Read(req[:]); n > 0 {
					plain <- n // the startup message, in plain text
				}
			}()
		}
	}()
	ca := newTestCA(t, t.TempDir(), "ca")
	dsn := "postgres://postgres:pw-not-shown@" + l.Addr().String() + "/postgres?connect_timeout=5"
	r := runCLI(t, nil, "stats", "--db", dsn, "--db-tls-ca", ca.pemPath)
	if r.code != 1 || !strings.Contains(r.stderr, "server refused TLS connection") || strings.Contains(r.stderr, "pw-not-shown") {
		t.Fatalf("want the refusal of TLS, without the password: %s", r)
	}
	select {
	case n := <-plain:
		t.Fatalf("the client sent %d bytes in plain text after the server declined TLS", n)
	default:
	}
}

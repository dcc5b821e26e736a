package testbroker

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Postgres is a PostgreSQL cluster of one test, in a folder of its own on a
// free port, with trust authentication for local TCP connections
// (replication ones included).
type Postgres struct {
	Port int
	Dir  string
	cmd  *exec.Cmd
	done chan struct{}
	cred *syscall.Credential
	bin  string
}

// DSN is the URL of database postgres as user postgres.
func (p *Postgres) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.Port)
}

// PGBinDir is where PostgreSQL's programs are: $OUTBOX_TEST_PG_BINDIR, or
// /usr/lib/postgresql/<newest>/bin.
func PGBinDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("OUTBOX_TEST_PG_BINDIR"); d != "" {
		return d
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	t.Fatal("this test needs PostgreSQL's initdb and postgres (apt-get install postgresql, or set OUTBOX_TEST_PG_BINDIR)")
	return ""
}

// StartPostgres initialises a cluster with conf appended to its
// postgresql.conf (for example "wal_level = logical\n"), starts it and
// stops it (fast shutdown) when the test ends. As root it runs as the user
// postgres, since PostgreSQL refuses to run as root.
func StartPostgres(t testing.TB, conf string) *Postgres {
	t.Helper()
	base := t.TempDir()
	p := &Postgres{Port: FreePort(t), Dir: filepath.Join(base, "pg"), bin: PGBinDir(t)}
	if err := os.Mkdir(p.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, the test runs PostgreSQL as the user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		for _, d := range []string{filepath.Dir(base), base} {
			if err := os.Chmod(d, 0o755); err != nil { //nolint:gosec // the user postgres must reach the cluster's folder
				t.Fatal(err)
			}
		}
		if err := os.Chown(p.Dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(p.Dir, "data")
	p.run(t, filepath.Join(p.bin, "initdb"), "-D", data, "-U", "postgres", "-E", "UTF8", "--auth=trust", "--no-sync")
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nfsync = off\nshared_buffers = 32MB\nmax_connections = 40\n%s",
		p.Port, p.Dir, conf)
	f.Close()
	p.start(t)
	t.Cleanup(p.Stop)
	return p
}

func (p *Postgres) run(t testing.TB, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
}

func (p *Postgres) start(t testing.TB) {
	t.Helper()
	p.cmd = exec.Command(filepath.Join(p.bin, "postgres"), "-D", filepath.Join(p.Dir, "data"))
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	logPath := filepath.Join(p.Dir, "postgres.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	p.done = make(chan struct{})
	done := p.done
	go func() { _ = p.cmd.Wait(); _ = logf.Close(); close(done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// pg_isready: accepting sessions, not only listening.
		if exec.Command(filepath.Join(p.bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port)).Run() == nil {
			return
		}
		select {
		case <-done:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("postgres exited before listening on %d:\n%s", p.Port, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres did not listen on %d within 30s", p.Port)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Stop shuts the cluster down (fast shutdown) and waits for it.
func (p *Postgres) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}

package outboxmysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
)

// binlogServer is a private MariaDB that writes a ROW binary log, started
// in a temporary folder on a free port by the first test that needs it and
// removed by TestMain.
type binlogServer struct {
	port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	root *sql.DB // over the Unix socket
}

var binlogSrv struct {
	once sync.Once
	s    *binlogServer
	err  error
}

// privateBinlog returns the private binlog server, starting it once.
func privateBinlog(t *testing.T) *binlogServer {
	t.Helper()
	binlogSrv.once.Do(func() { binlogSrv.s, binlogSrv.err = startBinlogServer() })
	if binlogSrv.err != nil {
		t.Fatalf("the binlog tests start their own MariaDB (mariadb-install-db and mariadbd, apt-get install mariadb-server): %v", binlogSrv.err)
	}
	return binlogSrv.s
}

func startBinlogServer() (*binlogServer, error) {
	dir, err := os.MkdirTemp("", "outbox-binlog-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &binlogServer{port: port, dir: dir, done: make(chan struct{})}
	data := filepath.Join(dir, "data")
	user := "root"
	if os.Geteuid() != 0 {
		user = os.Getenv("USER")
	}
	install := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+data, "--user="+user,
		"--auth-root-authentication-method=normal", "--skip-test-db")
	if out, err := install.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("mariadb-install-db: %v\n%s", err, out)
	}
	s.cmd = exec.Command("mariadbd", "--no-defaults", "--datadir="+data, "--user="+user,
		fmt.Sprintf("--port=%d", port), "--bind-address=127.0.0.1", "--socket="+s.socket(),
		"--pid-file="+filepath.Join(dir, "mariadb.pid"), "--log-error="+filepath.Join(dir, "error.log"),
		"--log-bin="+filepath.Join(data, "binlog"), "--binlog-format=ROW", "--server-id=1",
		"--innodb-buffer-pool-size=32M", "--skip-name-resolve")
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start mariadbd: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	if s.root, err = sql.Open("mysql", "root@unix("+s.socket()+")/?parseTime=true&loc=UTC"); err != nil {
		s.stop()
		return nil, err
	}
	for deadline := time.Now().Add(90 * time.Second); s.root.Ping() != nil; {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			s.stop()
			return nil, fmt.Errorf("mariadbd did not answer within 90s:\n%s", log)
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			s.stop()
			return nil, fmt.Errorf("mariadbd exited:\n%s", log)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := s.root.Exec("CREATE USER app@'%'"); err == nil {
		_, err = s.root.Exec("GRANT ALL ON *.* TO app@'%'")
	}
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *binlogServer) socket() string { return filepath.Join(s.dir, "mariadb.sock") }

// stop ends the server and removes its folder.
func (s *binlogServer) stop() {
	if s.root != nil {
		s.root.Close()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	os.RemoveAll(s.dir)
}

// stopBinlogServer stops the private server, if a test started it.
func stopBinlogServer() {
	if binlogSrv.s != nil {
		binlogSrv.s.stop()
	}
}

// exec runs statements as root, failing the test on an error.
func (s *binlogServer) exec(t *testing.T, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := s.root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// config is the connection of user (no password) to database db over TCP.
func (s *binlogServer) config(user, db string) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = user, "tcp", fmt.Sprintf("127.0.0.1:%d", s.port), db
	cfg.ParseTime, cfg.InterpolateParams = true, true
	return cfg
}

// binlogEnv is a database of its own on the private server, migrated, with
// a BinlogDriver on it.
type binlogEnv struct {
	srv *binlogServer
	db  *sql.DB
	cfg *mysql.Config
	drv *outboxmysql.Driver
	bd  *outboxmysql.BinlogDriver
}

func newBinlogEnv(t *testing.T) *binlogEnv {
	t.Helper()
	s := privateBinlog(t)
	b := make([]byte, 6)
	rand.Read(b)
	name := "binlog_" + hex.EncodeToString(b)
	s.exec(t, "CREATE DATABASE "+name)
	t.Cleanup(func() { s.root.Exec("DROP DATABASE " + name) })
	e := &binlogEnv{srv: s, cfg: s.config("app", name)}
	var err error
	if e.db, err = sql.Open("mysql", e.cfg.FormatDSN()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Close() })
	if e.drv, err = outboxmysql.New(e.db, outbox.Tables{}); err != nil {
		t.Fatal(err)
	}
	if err := e.drv.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.bd = e.binlog(t, e.cfg)
	return e
}

// binlog returns a new BinlogDriver on e's driver, reading as conn.
func (e *binlogEnv) binlog(t *testing.T, conn *mysql.Config) *outboxmysql.BinlogDriver {
	t.Helper()
	bd, err := e.drv.WithBinlog(outboxmysql.BinlogConfig{Conn: conn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bd.Close() })
	return bd
}

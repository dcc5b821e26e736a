package outboxpgx_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxpgx"
)

// closedPort returns a local port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func msg(i int) outbox.Message {
	return outbox.Message{MsgID: fmt.Sprintf("m-%d", i), Topic: "t", Payload: []byte(`{}`)}
}

// TestInboxUnavailable: the Inbox's error satisfies outbox.IsUnavailable
// when the server cannot be reached or ends the session, and not when the
// handler's own statement fails.
func TestInboxUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	apply := func(context.Context, pgx.Tx) error { return nil }

	t.Run("pool cannot connect", func(t *testing.T) {
		pool, err := pgxpool.New(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?connect_timeout=2", closedPort(t)))
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		d, err := outboxpgx.New(pool, outbox.Tables{})
		if err != nil {
			t.Fatal(err)
		}
		h := outbox.NewInbox(d).Handler("billing", func(ctx context.Context, tx pgx.Tx, _ outbox.Message) error { return apply(ctx, tx) })
		err = h(ctx, msg(1))
		if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
			t.Fatalf("handler error %v: want IsUnavailable", err)
		}
	})

	t.Run("backend terminated", func(t *testing.T) {
		pool, d := migratedPool(ctx, t, newSchema(t), 0)
		ib := outbox.NewInbox(d)
		_, err := ib.Process(ctx, "billing", "m-2", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
			return err
		})
		if !outbox.IsUnavailable(err) {
			t.Fatalf("Process error %v: want IsUnavailable", err)
		}
		// The message was not recorded, and the next call goes through.
		applied, err := ib.Process(ctx, "billing", "m-2", func(context.Context, pgx.Tx) error { return nil })
		if err != nil || !applied {
			t.Fatalf("after the outage: applied %v, err %v", applied, err)
		}
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM consumed_msg").Scan(&n); err != nil || n != 1 {
			t.Fatalf("consumed_msg holds %d rows (%v), want 1", n, err)
		}
	})

	t.Run("statement error is not an outage", func(t *testing.T) {
		_, d := migratedPool(ctx, t, newSchema(t), 0)
		_, err := outbox.NewInbox(d).Process(ctx, "billing", "m-3", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SELECT * FROM no_such_table")
			return err
		})
		if err == nil || outbox.IsUnavailable(err) {
			t.Fatalf("Process error %v: want an error that is not IsUnavailable", err)
		}
		perm := errors.New("bad payload")
		_, err = outbox.NewInbox(d).Process(ctx, "billing", "m-4", func(context.Context, pgx.Tx) error { return outbox.Permanent(perm) })
		if !outbox.IsPermanent(err) || outbox.IsUnavailable(err) {
			t.Fatalf("Process error %v: want the Permanent error as it was", err)
		}
	})

	t.Run("stdlib cannot connect", func(t *testing.T) {
		db, err := sql.Open("pgx", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?connect_timeout=2", closedPort(t)))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		d, err := outboxpgx.NewStdlib(db, outbox.Tables{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = outbox.NewInbox(d).Process(ctx, "billing", "m-5", func(context.Context, *sql.Tx) error { return nil })
		if !outbox.IsUnavailable(err) {
			t.Fatalf("Process error %v: want IsUnavailable", err)
		}
	})

	t.Run("stdlib backend terminated", func(t *testing.T) {
		db, err := sql.Open("pgx", newSchema(t))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		d, err := outboxpgx.NewStdlib(db, outbox.Tables{})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = outbox.NewInbox(d).Process(ctx, "billing", "m-6", func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
			return err
		})
		if !outbox.IsUnavailable(err) {
			t.Fatalf("Process error %v: want IsUnavailable", err)
		}
	})
}

// resetProxy forwards connections to target until reset, which aborts them
// (TCP RST), as a network cut or a crashed server leaves them.
type resetProxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startResetProxy(t *testing.T, target string) *resetProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &resetProxy{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c) }()
			go func() { _, _ = io.Copy(c, u) }()
		}
	}()
	t.Cleanup(func() { l.Close(); p.reset() })
	return p
}

func (p *resetProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		c.Close()
	}
	p.conns = nil
}

// TestInboxUnavailableReset: a connection reset while a statement of the
// inbox's transaction waits for its answer (a bare network error, no
// server error) is an outage too, for both drivers.
func TestInboxUnavailableReset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := newSchema(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := startResetProxy(t, u.Host)
	proxied := strings.Replace(dsn, u.Host, p.l.Addr().String(), 1)

	t.Run("pool", func(t *testing.T) {
		_, d := migratedPool(ctx, t, proxied, 0)
		_, err := outbox.NewInbox(d).Process(ctx, "billing", "m-7", func(ctx context.Context, tx pgx.Tx) error {
			// The reset comes while the statement waits for its answer.
			time.AfterFunc(300*time.Millisecond, p.reset)
			_, err := tx.Exec(ctx, "SELECT pg_sleep(2)")
			t.Logf("the statement after the reset: %v", err)
			return err
		})
		if !outbox.IsUnavailable(err) {
			t.Fatalf("Process error %v: want IsUnavailable", err)
		}
	})
	t.Run("stdlib", func(t *testing.T) {
		db, err := sql.Open("pgx", proxied)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		d, err := outboxpgx.NewStdlib(db, outbox.Tables{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = outbox.NewInbox(d).Process(ctx, "billing", "m-8", func(ctx context.Context, tx *sql.Tx) error {
			// The reset comes while the statement waits for its answer.
			time.AfterFunc(300*time.Millisecond, p.reset)
			_, err := tx.ExecContext(ctx, "SELECT pg_sleep(2)")
			t.Logf("the statement after the reset: %v", err)
			return err
		})
		if !outbox.IsUnavailable(err) {
			t.Fatalf("Process error %v: want IsUnavailable", err)
		}
	})
}

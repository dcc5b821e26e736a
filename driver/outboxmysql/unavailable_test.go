package outboxmysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxmysql"
)

// TestInboxUnavailable: the Inbox's error satisfies outbox.IsUnavailable
// when the server cannot be reached or kills the connection, and not when
// the handler's own statement fails.
func TestInboxUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		cfg := mysql.NewConfig()
		cfg.User, cfg.Net, cfg.Addr, cfg.DBName, cfg.Timeout = "root", "tcp", addr, "test", 2*time.Second
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		d, err := outboxmysql.New(db, outbox.Tables{})
		if err != nil {
			t.Fatal(err)
		}
		h := outbox.NewInbox(d).Handler("billing", func(context.Context, *sql.Tx, outbox.Message) error { return nil })
		err = h(ctx, outbox.Message{MsgID: "m-1", Topic: "t", Payload: []byte(`{}`)})
		if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
			t.Fatalf("handler error %v: want IsUnavailable", err)
		}
	})

	t.Run("connection killed", func(t *testing.T) {
		env := setup(t)
		ib := outbox.NewInbox(env.Driver)
		_, err := ib.Process(ctx, "billing", "m-2", func(ctx context.Context, tx *sql.Tx) error {
			var id int64
			if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				return err
			}
			_, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
			if err != nil {
				return fmt.Errorf("kill: %w", err)
			}
			_, err = tx.ExecContext(ctx, "SELECT 1")
			return err
		})
		if !outbox.IsUnavailable(err) {
			t.Fatalf("Process error %v: want IsUnavailable", err)
		}
		applied, err := ib.Process(ctx, "billing", "m-2", func(context.Context, *sql.Tx) error { return nil })
		if err != nil || !applied {
			t.Fatalf("after the outage: applied %v, err %v", applied, err)
		}
	})

	t.Run("statement error is not an outage", func(t *testing.T) {
		env := setup(t)
		_, err := outbox.NewInbox(env.Driver).Process(ctx, "billing", "m-3", func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "SELECT * FROM no_such_table")
			return err
		})
		if err == nil || outbox.IsUnavailable(err) {
			t.Fatalf("Process error %v: want an error that is not IsUnavailable", err)
		}
	})
}

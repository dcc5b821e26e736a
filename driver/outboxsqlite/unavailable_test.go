package outboxsqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
)

// TestInboxUnavailable: the Inbox's error satisfies outbox.IsUnavailable
// when the database file cannot be opened or stays locked, and not when the
// handler's own statement fails.
func TestInboxUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("database gone", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "volume")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		db, err := outboxsqlite.Open(filepath.Join(dir, "outbox.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		d, err := outboxsqlite.New(db, outbox.Tables{})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		// The volume goes away: the pool's connections are dropped, and a
		// new one cannot open the file.
		db.SetMaxIdleConns(0)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		h := outbox.NewInbox(d).Handler("billing", func(context.Context, *sql.Tx, outbox.Message) error { return nil })
		err = h(ctx, outbox.Message{MsgID: "m-1", Topic: "t", Payload: []byte(`{}`)})
		if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
			t.Fatalf("handler error %v: want IsUnavailable", err)
		}
	})

	t.Run("locked by another writer", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "locked.db")
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(100)&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		d, err := outboxsqlite.New(db, outbox.Tables{})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		other, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		tx, err := other.BeginTx(ctx, nil) // holds the write lock
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		_, err = outbox.NewInbox(d).Process(ctx, "billing", "m-2", func(context.Context, *sql.Tx) error { return nil })
		if !outbox.IsUnavailable(err) {
			t.Fatalf("Process error %v: want IsUnavailable", err)
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

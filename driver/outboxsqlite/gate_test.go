package outboxsqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
)

// Writers through the gate (write transactions, the Writer's, autocommit
// INSERTs and a relay's claims and marks) finish while another goroutine
// holds a read transaction and uses the *sql.DB, and one holds a write
// transaction and reads through the *sql.DB; no row is lost. With the gate
// off, writers rely on SQLite's busy timeout, and a write that waits past it
// is refused with SQLITE_BUSY: the test counts such a write, tries it again,
// and still wants every row once.
func TestWriteGateConcurrentWriters(t *testing.T) {
	for _, gate := range []bool{true, false} {
		t.Run(fmt.Sprintf("gate=%v", gate), func(t *testing.T) { testConcurrentWriters(t, gate) })
	}
}

func testConcurrentWriters(t *testing.T, gate bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "gate.db")
	db, err := outboxsqlite.Open(path, outboxsqlite.WriteGate(gate))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A second *sql.DB on the same file shares the gate.
	db2, err := outboxsqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	drv, err := outboxsqlite.New(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE gate_rows (who TEXT NOT NULL, n INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(drv, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}

	const writers, each = 12, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers+4)
	var extra atomic.Int64 // rows written by the goroutines that hold a transaction
	var busy atomic.Int64  // writes refused with SQLITE_BUSY, gate off only
	refused := func(err error) bool {
		if err == nil || gate || !strings.Contains(err.Error(), "SQLITE_BUSY") {
			return false
		}
		busy.Add(1)
		return true
	}
	for i := range writers {
		wg.Go(func() {
			for n := 0; n < each; n++ {
				var err error
				switch n % 3 {
				case 0: // a business transaction with its message, through the Writer
					err = drv.RunInTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
						if _, err := tx.ExecContext(ctx, "INSERT INTO gate_rows VALUES (?, ?)", "tx", n); err != nil {
							return err
						}
						return w.Write(ctx, tx, outbox.Message{MsgID: fmt.Sprintf("w%d-%d", i, n), Topic: "gate", Payload: json.RawMessage(`{}`)})
					})
				case 1: // an autocommit INSERT
					_, err = db.ExecContext(ctx, "INSERT INTO gate_rows VALUES (?, ?)", "exec", n)
				case 2: // a transaction on the other *sql.DB
					var tx *sql.Tx
					if tx, err = db2.BeginTx(ctx, nil); err == nil {
						if _, err = tx.ExecContext(ctx, "INSERT INTO gate_rows VALUES (?, ?)", "db2", n); err != nil {
							tx.Rollback()
						} else {
							err = tx.Commit()
						}
					}
				}
				if refused(err) {
					n-- // the same write again
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d, write %d: %w", i, n, err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	var side sync.WaitGroup
	side.Go(func() { // holds a read transaction and uses the *sql.DB meanwhile
		for {
			select {
			case <-done:
				return
			default:
			}
			tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
			if err != nil {
				errs <- fmt.Errorf("reader: begin: %w", err)
				return
			}
			var a, b int
			err = tx.QueryRowContext(ctx, "SELECT count(*) FROM gate_rows").Scan(&a)
			if err == nil {
				err = db.QueryRowContext(ctx, "SELECT count(*) FROM gate_rows").Scan(&b)
			}
			if err == nil {
				_, err = db.ExecContext(ctx, "INSERT INTO gate_rows VALUES (?, ?)", "reader", 0)
			}
			if err == nil {
				extra.Add(1)
				err = tx.Commit()
			}
			if refused(err) {
				tx.Rollback()
				continue
			}
			if err != nil {
				tx.Rollback()
				errs <- fmt.Errorf("reader: %w", err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	side.Go(func() { // holds a write transaction and reads through the *sql.DB
		for {
			select {
			case <-done:
				return
			default:
			}
			err := drv.RunInTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				var n int
				if err := db.QueryRowContext(ctx, "SELECT count(*) FROM gate_rows").Scan(&n); err != nil {
					return err
				}
				rtx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
				if err != nil {
					return err
				}
				defer rtx.Rollback()
				if err := rtx.QueryRowContext(ctx, "SELECT count(*) FROM gate_rows").Scan(&n); err != nil {
					return err
				}
				_, err = tx.ExecContext(ctx, "INSERT INTO gate_rows VALUES (?, ?)", "holder", n)
				return err
			})
			if refused(err) {
				continue
			}
			if err != nil {
				errs <- fmt.Errorf("holder: %w", err)
				return
			}
			extra.Add(1)
			time.Sleep(time.Millisecond)
		}
	})
	relay, err := outbox.NewRelay(drv, outbox.Discard, outbox.RelayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	side.Go(func() { // claims and marks
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := relay.RunOnce(ctx); err != nil && !refused(err) {
				errs <- fmt.Errorf("relay: %w", err)
				return
			}
		}
	})

	finished := make(chan struct{})
	go func() { wg.Wait(); close(done); side.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(90 * time.Second):
		t.Fatal("writers did not finish within 90s: deadlock")
	}
	close(errs)
	if busy.Load() > 0 {
		t.Logf("%d writes refused with SQLITE_BUSY and tried again", busy.Load())
	}
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	var rows int64
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM gate_rows").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if want := writers*each + extra.Load(); rows != want {
		t.Errorf("gate_rows has %d rows, want %d", rows, want)
	}
	for {
		rep, err := relay.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Results) == 0 {
			break
		}
	}
	st, err := drv.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var msgs int64
	for n := range each {
		if n%3 == 0 {
			msgs += writers
		}
	}
	if st.Sent != msgs || st.Pending != 0 {
		t.Errorf("messages: sent=%d pending=%d, want sent=%d pending=0", st.Sent, st.Pending, msgs)
	}
}

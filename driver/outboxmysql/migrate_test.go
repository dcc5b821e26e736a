package outboxmysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

// TestMigrateFailureReleasesTheLock: GET_LOCK belongs to the connection, not
// to the transaction, so a migration that fails must release it before the
// connection goes back to the pool; before, the pooled connection kept it,
// and the next migrator on another connection waited 60 s for it.
func TestMigrateFailureReleasesTheLock(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ctx := context.Background()
	// A table of the outbox's name that is not an outbox: version 2's UPDATE
	// of its status fails.
	if err := env.Exec(ctx, "CREATE TABLE broken_outbox (id BIGINT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	d, err := env.WithTables(outbox.Tables{Outbox: "broken_outbox", Inbox: "broken_inbox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err == nil {
		t.Fatal("migrate of a table that is not an outbox: no error")
	}
	if n, err := env.QueryInt(ctx, "SELECT IS_FREE_LOCK('outbox-migrate:broken_outbox')"); err != nil || n != 1 {
		t.Fatalf("IS_FREE_LOCK after the failed migration = %d, %v; want 1 (released)", n, err)
	}
}

// TestMigrateWithoutTheLockFails: a migrator that did not get the lock
// stops (before, it read GET_LOCK's answer and ignored it: after a timeout,
// 0, or an error, NULL, it migrated beside the process that held the lock,
// and MySQL's DDL, which commits on its own, let the two interleave). Here
// another connection holds the lock and the waiting GET_LOCK is killed,
// which makes it answer NULL.
func TestMigrateWithoutTheLockFails(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const lock = "outbox-migrate:locked_outbox"
	hold, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	var got int
	if err := hold.QueryRowContext(ctx, "SELECT GET_LOCK('"+lock+"', 0)").Scan(&got); err != nil || got != 1 {
		t.Fatalf("GET_LOCK from the other process = %d, %v", got, err)
	}
	defer hold.ExecContext(context.Background(), "DO RELEASE_LOCK('"+lock+"')")

	d, err := env.WithTables(outbox.Tables{Outbox: "locked_outbox", Inbox: "locked_inbox"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Migrate(ctx) }()
	var waiter int64
	for waiter == 0 {
		err := admin.QueryRowContext(ctx, `SELECT id FROM information_schema.processlist
WHERE id <> CONNECTION_ID() AND info LIKE 'SELECT GET_LOCK(%`+lock+`%'`).Scan(&waiter)
		if err != nil && err != sql.ErrNoRows {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("migrate returned %v while another process held the lock", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", waiter)); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if err == nil || !strings.Contains(err.Error(), "locked_outbox") {
		t.Fatalf("migrate without the lock: %v; want an error naming the table", err)
	}
	if n, err := env.QueryInt(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'locked%'"); err != nil || n != 0 {
		t.Fatalf("migrate without the lock created %d tables (%v)", n, err)
	}
}

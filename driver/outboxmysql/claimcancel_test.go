package outboxmysql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

// TestClaimCanceledWhileLeasing: a claim whose context ends while its lease
// is being recorded leaves no lease behind. The lease table is not
// transactional, so a lease the server wrote for a claim that then failed
// would hide its rows from every relay until it ran out.
func TestClaimCanceledWhileLeasing(t *testing.T) {
	var dsn string
	env := setupWith(t, func(c *mysql.Config) { dsn = c.FormatDSN() })
	ctx := context.Background()
	w, err := outbox.NewWriter(env.Driver, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := w.Write(ctx, tx, outbox.Message{MsgID: fmt.Sprintf("lease-%d", i), Topic: "t", Payload: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	first, err := env.QueryInt(ctx, "SELECT MIN(id) FROM outbox")
	if err != nil {
		t.Fatal(err)
	}

	// Another session's read lock on the lease table lets the claim read it
	// and lock its rows, and holds its lease insert until the context ends.
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "LOCK TABLES outbox_claims READ"); err != nil {
		t.Fatal(err)
	}
	unlocked := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		_, err := conn.ExecContext(ctx, "UNLOCK TABLES")
		unlocked <- err
	}()
	// The cursor's path: a claim from the start drops expired leases first,
	// which the lock would hold up before any row is locked.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	c, err := env.Driver.Claim(cctx, outboxdriver.ClaimParams{Limit: 10, AfterID: first, Lease: time.Hour})
	cancel()
	if err == nil {
		t.Logf("the claim finished its lease after its context ended: %d messages; aborting it", len(c.Messages()))
		if err := c.Abort(ctx); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Logf("the claim failed: %v", err)
	}
	if err := <-unlocked; err != nil {
		t.Fatal(err)
	}
	// Let the server finish what the canceled claim had sent it.
	time.Sleep(200 * time.Millisecond)
	again, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, AfterID: first, Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Abort(ctx)
	if n := len(again.Messages()); n != 3 {
		left, _ := env.QueryInt(ctx, "SELECT COUNT(*) FROM outbox_claims")
		t.Fatalf("a claim after the canceled one got %d of 3 messages; %d leases are left in outbox_claims", n, left)
	}
}

package outboxmysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-go/outbox"
)

// TestTrailingSpacesAreDistinct: MariaDB's and MySQL's utf8mb4_bin pad
// with spaces, so msg_ids "m" and "m " were one key: the writer refused the
// second as a duplicate, and the inbox took the second message as consumed
// and skipped its effect. Version 3 gives msg_id and consumer_group a NO PAD
// collation, as PostgreSQL and SQLite compare them.
func TestTrailingSpacesAreDistinct(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ctx := context.Background()
	w, err := outbox.NewWriter(env.Driver, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	write := func(ids ...string) error {
		msgs := make([]outbox.Message, len(ids))
		for i, id := range ids {
			msgs[i] = outbox.Message{MsgID: id, Topic: "t", Payload: []byte(`{}`)}
		}
		return env.Driver.RunInTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) })
	}
	for _, id := range []string{"m", "m ", "m  "} {
		if err := write(id); err != nil {
			t.Fatalf("write %q: %v", id, err)
		}
	}
	if err := write("n", "n "); err != nil {
		t.Fatalf("write n and n  in one call: %v", err)
	}
	if n, err := env.QueryInt(ctx, "SELECT count(*) FROM outbox"); err != nil || n != 5 {
		t.Fatalf("%d rows, %v; want 5", n, err)
	}
	// A real duplicate among them is still one, and named exactly.
	err = write("o", "m ")
	var dup *outbox.DuplicateError
	if !errors.As(err, &dup) || len(dup.MsgIDs) != 1 || dup.MsgIDs[0] != "m " {
		t.Fatalf("write o and m  again: %v; want a duplicate of \"m \" alone", err)
	}

	ib := outbox.NewInbox(env.Driver)
	var ran []string
	for _, c := range []struct {
		group, id string
		applied   bool
	}{{"g", "m", true}, {"g", "m ", true}, {"g ", "m", true}, {"g", "m", false}, {"g", "m ", false}} {
		applied, err := ib.Process(ctx, c.group, c.id, func(context.Context, *sql.Tx) error {
			ran = append(ran, fmt.Sprintf("%q/%q", c.group, c.id))
			return nil
		})
		if err != nil || applied != c.applied {
			t.Fatalf("inbox %q/%q: applied %v, %v; want %v", c.group, c.id, applied, err, c.applied)
		}
	}
	if got := strings.Join(ran, ","); got != `"g"/"m","g"/"m ","g "/"m"` {
		t.Fatalf("handlers ran for %s; want each of g/m, g/(m ) and (g )/m once", got)
	}
}

// TestMigrateToNoPadKeepsRows: version 3 on tables that version 2 left with
// utf8mb4_bin and rows in them keeps the rows, and from then on a trailing
// space makes another key.
func TestMigrateToNoPadKeepsRows(t *testing.T) {
	t.Parallel()
	env := setup(t)
	ctx := context.Background()
	for _, q := range []string{
		"ALTER TABLE outbox MODIFY msg_id VARCHAR(64) NOT NULL",
		"ALTER TABLE consumed_msg MODIFY consumer_group VARCHAR(64) NOT NULL, MODIFY msg_id VARCHAR(64) NOT NULL",
		"DELETE FROM outbox_migrations WHERE version >= 3",
		"INSERT INTO outbox (msg_id, topic, payload) VALUES ('a', 't', '{}'), ('b ', 't', '{}')",
		"INSERT INTO consumed_msg (consumer_group, msg_id) VALUES ('g', 'a')",
	} {
		if err := env.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := env.Exec(ctx, "INSERT INTO outbox (msg_id, topic, payload) VALUES ('a ', 't', '{}')"); err == nil {
		t.Fatal("the tables were not back at version 2's utf8mb4_bin: 'a ' is not a duplicate of 'a'")
	}
	if err := env.Driver.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := env.QueryInt(ctx, "SELECT count(*) FROM outbox WHERE msg_id IN ('a', 'b ')"); err != nil || n != 2 {
		t.Fatalf("%d of the 2 rows after the migration (%v)", n, err)
	}
	for _, q := range []string{
		"INSERT INTO outbox (msg_id, topic, payload) VALUES ('a ', 't', '{}'), ('b', 't', '{}')",
		"INSERT INTO consumed_msg (consumer_group, msg_id) VALUES ('g', 'a '), ('g ', 'a')",
	} {
		if err := env.Exec(ctx, q); err != nil {
			t.Fatalf("after the migration, %s: %v", q, err)
		}
	}
}

package outboxsqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestFirstKeywords(t *testing.T) {
	for _, c := range []struct {
		query string
		want  [3]string
	}{
		{"INSERT INTO t VALUES (1)", [3]string{"INSERT", "INTO", "T"}},
		{"  \n\tupdate t set a = 1", [3]string{"UPDATE", "T", "SET"}},
		{"-- note\n/* x */ delete from t", [3]string{"DELETE", "FROM", "T"}},
		{"rollback transaction to sp", [3]string{"ROLLBACK", "TRANSACTION", "TO"}},
		{"SELECT 1", [3]string{"SELECT"}},
		{"/* unterminated", [3]string{}},
		{"", [3]string{}},
	} {
		if got := firstKeywords(c.query); got != c.want {
			t.Errorf("firstKeywords(%q) = %q, want %q", c.query, got, c.want)
		}
	}
}

// A transaction begun with a statement passes the gate by until it ends.
func TestTrackManualTransaction(t *testing.T) {
	var c gatedConn
	for _, step := range []struct {
		query  string
		failed bool
		manual bool
	}{
		{"BEGIN IMMEDIATE", false, true},
		{"INSERT INTO t VALUES (1)", false, true},
		{"ROLLBACK TO sp", false, true},
		{"ROLLBACK TRANSACTION TO SAVEPOINT sp", false, true},
		{"COMMIT", true, true},
		{"COMMIT", false, false},
		{"SAVEPOINT sp", false, true},
		{"ROLLBACK", false, false},
		{"BEGIN", true, false},
	} {
		var err error
		if step.failed {
			err = errTest
		}
		c.track(firstKeywords(step.query), err)
		if c.manual != step.manual {
			t.Fatalf("after %q (failed %v): manual = %v, want %v", step.query, step.failed, c.manual, step.manual)
		}
	}
}

type testError struct{}

func (testError) Error() string { return "test" }

var errTest error = testError{}

// The gated connections checkpoint the WAL, SQLite's automatic checkpoint
// being off for them.
func TestWriteGateCheckpoints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ckpt.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE blobs (b BLOB)"); err != nil {
		t.Fatal(err)
	}
	blob := make([]byte, 64<<10)
	for i := range 2 * autoCheckpointPages * 4096 / len(blob) {
		if _, err := db.ExecContext(ctx, "INSERT INTO blobs VALUES (?)", blob); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			continue
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM blobs WHERE rowid = (SELECT min(rowid) FROM blobs)"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	wal, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if max := int64(autoCheckpointPages+1000) * 4120; wal.Size() > max {
		t.Errorf("the WAL has %d bytes, more than %d: it was not checkpointed", wal.Size(), max)
	}
}

package outboxsqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"
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
	path, db := blobsDB(t)
	ctx := context.Background()
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
	if max := int64(inlineCheckpointPages+1000) * 4120; wal.Size() > max {
		t.Errorf("the WAL has %d bytes, more than %d: it was not checkpointed", wal.Size(), max)
	}
}

// A WAL past autoCheckpointPages but short of inlineCheckpointPages is
// checkpointed by the checkpointer, not by the writer: the writes that made
// it due return without the checkpoint, and soon after one the WAL starts
// again from its beginning.
func TestCheckpointerCheckpoints(t *testing.T) {
	path, db := blobsDB(t)
	ctx := context.Background()
	g := openGate(gateKey(path))
	defer closeGate(g)
	blob := make([]byte, 64<<10)
	for i := 0; g.walFrames() < autoCheckpointPages+500; i++ {
		if i == inlineCheckpointPages*4096/len(blob) {
			t.Fatalf("after %d writes of %d bytes the WAL has %d frames: the writes checkpointed it themselves", i, len(blob), g.walFrames())
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO blobs VALUES (?)", blob); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := db.ExecContext(ctx, "INSERT INTO blobs VALUES (x'00')"); err != nil {
			t.Fatal(err)
		}
		if n := g.walFrames(); n < autoCheckpointPages {
			return // checkpointed, and restarted by the write
		}
		if time.Now().After(deadline) {
			t.Fatalf("the WAL still has %d frames: the checkpointer did not checkpoint it", g.walFrames())
		}
	}
}

// blobsDB opens a new database file with a table blobs (b BLOB), closed at
// the end of the test.
func blobsDB(t *testing.T) (string, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "blobs.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(context.Background(), "CREATE TABLE blobs (b BLOB)"); err != nil {
		t.Fatal(err)
	}
	return path, db
}

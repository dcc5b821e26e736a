package outboxsqlite_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/driver/outboxsqlite"
)

// A SQLite column takes whatever a sidecar writes into it. A created_at the
// relay cannot read as a time must not fail the claims that meet its row:
// that held up every message behind it, for good. The forms SQLite's own
// date functions accept are read as they read them.
func TestSidecarCreatedAtForms(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := outboxsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	drv, err := outboxsqlite.New(db, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	utc := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	rows := []struct {
		id    string
		value any // bound as the created_at parameter
		want  time.Time
	}{
		{"sqlite-format", "2024-05-06 07:08:09.123", utc("2024-05-06T07:08:09.123Z")},
		{"with-zone", "2024-05-06T07:08:09+02:00", utc("2024-05-06T05:08:09Z")},
		{"minutes", "2024-05-06 07:08", utc("2024-05-06T07:08:00Z")},
		{"date", "2024-05-06", utc("2024-05-06T00:00:00Z")},
		{"unix-seconds", int64(1700000000), utc("2023-11-14T22:13:20Z")},
		{"unix-text", "1700000000.5", utc("2023-11-14T22:13:20.5Z")},
		{"julian-day", 2460436.5, utc("2024-05-06T00:00:00Z")},
		{"garbage", "yesterday-ish", time.Time{}},
		{"year-too-far", int64(1e15), time.Time{}},
	}
	for _, r := range rows {
		if _, err := db.ExecContext(ctx, `INSERT INTO outbox (msg_id, topic, payload, created_at) VALUES (?, 'sidecar.time', '{}', ?)`, r.id, r.value); err != nil {
			t.Fatalf("insert %s: %v", r.id, err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO outbox (msg_id, topic, payload) VALUES ('default', 'sidecar.time', '{}')`); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	got := map[string]outbox.Message{}
	pub := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		got[m.MsgID] = m
		return nil
	})
	relay, err := outbox.NewRelay(drv, pub, outbox.RelayConfig{BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	for {
		rep, err := relay.RunOnce(ctx)
		if err != nil {
			t.Fatalf("a claim failed on a sidecar's created_at: %v", err)
		}
		if len(rep.Results) == 0 {
			break
		}
	}
	if len(got) != len(rows)+1 {
		t.Fatalf("relayed %d of %d rows: %v", len(got), len(rows)+1, got)
	}
	for _, r := range rows {
		if m := got[r.id]; !m.CreatedAt.Equal(r.want) {
			t.Errorf("%s (%v): CreatedAt %v, want %v", r.id, r.value, m.CreatedAt, r.want)
		}
	}
	if m := got["default"]; time.Since(m.CreatedAt) > time.Minute || time.Since(m.CreatedAt) < 0 {
		t.Errorf("default created_at read as %v", m.CreatedAt)
	}
	var pending int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM outbox WHERE status <> 1`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if pending != 0 {
		t.Fatalf("%d rows not SENT", pending)
	}

	// The operator's view works on such rows too: stats (the oldest pending
	// row's age), dead list and dead show.
	for _, q := range []string{
		`INSERT INTO outbox (msg_id, topic, payload, created_at) VALUES ('pending-garbage', 'sidecar.late', '{}', '06/05/2024 07:08')`,
		`INSERT INTO outbox (msg_id, topic, payload, status, created_at, next_retry_at) VALUES ('dead-garbage', 'sidecar.time', '{}', 2, 'not a time', 'nor this')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := drv.Stats(ctx); err != nil {
		t.Errorf("stats on rows whose times cannot be read: %v", err)
	}
	dead, err := drv.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusDead})
	if err != nil || len(dead) != 1 || !dead[0].CreatedAt.IsZero() {
		t.Errorf("dead list: %v, %+v", err, dead)
	}
	if m, err := drv.GetMessage(ctx, "dead-garbage"); err != nil || !m.CreatedAt.IsZero() || !m.NextRetryAt.IsZero() {
		t.Errorf("dead show: %v, %+v", err, m)
	}
}

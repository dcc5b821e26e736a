//go:build volume

package main

// The volume measurements of docs/retention.md: run on a table filled by
// bench/volume/load-*.sql, never on a production table (they add rows,
// relay them to nowhere and delete SENT rows). Run with
//
//	OUTBOX_VOLUME_DB=postgres://postgres@127.0.0.1:55432/vol \
//	  go test -tags volume -run TestVolume -v -timeout 2h .
//
// OUTBOX_VOLUME_DAYS is the load's spread of created_at (default 7),
// OUTBOX_VOLUME_DRAIN the NEW rows added for each relay run (default 200000),
// OUTBOX_VOLUME_DUTY the cleaner's CleanerConfig.DutyCycle beside the relay
// (default 1), and OUTBOX_VOLUME_ONLY=cleaner runs only the relay beside the
// cleaner.

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/cmd/outbox/internal/dbopen"
	"github.com/outbox-go/outbox/internal/sqlstore"
	"github.com/outbox-go/outbox/outboxdriver"
)

type volume struct {
	t     *testing.T
	d     *dbopen.Database
	exec  func(ctx context.Context, stmt string) error
	days  int
	drain int
	duty  float64 // the cleaner's DutyCycle beside the relay
	added int64   // rows added by addNew so far, for unique msg_ids
	run   string  // this run's part of addNew's msg_ids
}

func volumeEnv(t *testing.T, key string, def int) int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", key, v)
	}
	return n
}

func TestVolume(t *testing.T) {
	dsn := os.Getenv("OUTBOX_VOLUME_DB")
	if dsn == "" {
		t.Fatal("set OUTBOX_VOLUME_DB to a database loaded by bench/volume/load-*.sql")
	}
	ctx := context.Background()
	d, err := dbopen.Open(ctx, dsn, dbopen.TLS{}, outbox.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	v := &volume{t: t, d: d, days: volumeEnv(t, "OUTBOX_VOLUME_DAYS", 7), drain: volumeEnv(t, "OUTBOX_VOLUME_DRAIN", 200000), duty: 1}
	if s := os.Getenv("OUTBOX_VOLUME_DUTY"); s != "" {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || !(f > 0 && f <= 1) {
			t.Fatalf("OUTBOX_VOLUME_DUTY=%q: want a share of time above 0 and at most 1", s)
		}
		v.duty = f
	}
	only := os.Getenv("OUTBOX_VOLUME_ONLY")
	if only != "" && only != "cleaner" {
		t.Fatalf("OUTBOX_VOLUME_ONLY=%q: want cleaner, or leave it unset", only)
	}
	switch {
	case d.PG != nil:
		pool := d.PG.Pool()
		v.exec = func(ctx context.Context, stmt string) error { _, err := pool.Exec(ctx, stmt); return err }
	default:
		db := d.SQL.SQLDB()
		v.exec = func(ctx context.Context, stmt string) error { _, err := db.ExecContext(ctx, stmt); return err }
	}
	// A relay drains the load's backlog first, as one would have run all
	// along: PostgreSQL's low-water mark only moves while a relay runs.
	took, _ := v.drainAll(ctx, 0)
	fmt.Printf("volume relay: the load's backlog drained in %.2fs\n", took.Seconds())
	if only == "" {
		v.addNew(ctx, 10000)
		v.reads(ctx)
		v.plans(ctx)
		v.claims(ctx)
		v.writer(ctx)
	}
	v.relayWithCleaner(ctx)
}

// sql is the sqlstore.Store under the driver.
func (v *volume) sql() *sqlstore.Store {
	st, ok := sqlstore.Of(v.d.Store)
	if !ok {
		v.t.Fatalf("%T is not a driver of this repository", v.d.Store)
	}
	return st
}

// timed runs fn n times and prints the median and the slowest.
func (v *volume) timed(name string, n int, fn func() error) {
	v.t.Helper()
	var ds []time.Duration
	for range n {
		start := time.Now()
		if err := fn(); err != nil {
			v.t.Fatalf("%s: %v", name, err)
		}
		ds = append(ds, time.Since(start))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	fmt.Printf("volume read %-28s median %9.2f ms  max %9.2f ms\n", name, ms(ds[len(ds)/2]), ms(ds[len(ds)-1]))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// reads times every admin, console and stats read.
func (v *volume) reads(ctx context.Context) {
	s := v.d.Store
	st := v.sql()
	v.timed("stats", 3, func() error { _, err := s.Stats(ctx); return err })
	v.timed("backlog", 5, func() error { _, err := st.Backlog(ctx); return err })
	v.timed("topic backlog", 5, func() error { _, _, err := st.TopicBacklog(ctx); return err })
	v.timed("rescan mark", 5, func() error { _, _, err := st.RescanMark(ctx); return err })
	v.timed("list dead (100)", 5, func() error {
		_, err := s.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusDead, Limit: 100})
		return err
	})
	v.timed("list new (100)", 5, func() error {
		_, err := s.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusNew, Limit: 100})
		return err
	})
	v.timed("get by msg_id", 5, func() error { _, err := s.GetMessage(ctx, "vol-1000"); return err })
	v.timed("search dead, no filter", 5, func() error { _, _, err := st.SearchDead(ctx, outboxdriver.DeadQuery{}); return err })
	v.timed("search dead, error text", 5, func() error {
		_, _, err := st.SearchDead(ctx, outboxdriver.DeadQuery{ErrorContains: "no such text"})
		return err
	})
	v.timed("search dead by msg_id", 5, func() error { _, _, err := st.SearchDead(ctx, outboxdriver.DeadQuery{MsgID: "vol-1000"}); return err })
	v.timed("count dead, topic", 5, func() error {
		_, err := st.CountDead(ctx, outboxdriver.DeadQuery{Topic: "topic-0"}, 100000)
		return err
	})
}

// plans prints every plan of the stores' Explain calls and fails on a
// full scan of the outbox table.
func (v *volume) plans(ctx context.Context) {
	st := v.sql()
	bad := map[string]string{"postgres": "Seq Scan on outbox ", "mysql": " outbox ALL "}[v.d.Dialect]
	for _, e := range []struct {
		name string
		fn   func(context.Context) (string, error)
	}{{"claim", st.ExplainClaim}, {"backlog", st.ExplainBacklog}, {"dead", st.ExplainDead}, {"console", st.ExplainConsole}} {
		plan, err := e.fn(ctx)
		if err != nil {
			v.t.Fatal(err)
		}
		fmt.Printf("volume plan %s:\n%s\n", e.name, plan)
		if strings.Contains(plan, bad) {
			v.t.Errorf("the %s plan reads the whole table:\n%s", e.name, plan)
		}
	}
}

// claims times claims of 500 rows from the start (the relay's rescan) and
// aborts them.
func (v *volume) claims(ctx context.Context) {
	s := v.d.Store
	v.timed("claim 500 and abort", 7, func() error {
		c, err := s.Claim(ctx, outboxdriver.ClaimParams{Limit: 500, Lease: time.Minute})
		if err != nil {
			return err
		}
		if len(c.Messages()) == 0 {
			return fmt.Errorf("claimed nothing: the table holds no NEW row")
		}
		return c.Abort(ctx)
	})
}

// writer measures the Writer on the loaded table: 8 producers, one message
// per transaction, for 5 seconds.
func (v *volume) writer(ctx context.Context) {
	var write func(ctx context.Context, m outbox.Message) error
	if v.d.PG != nil {
		w, err := outbox.NewWriter(v.d.PG, outbox.WriterConfig{})
		if err != nil {
			v.t.Fatal(err)
		}
		write = func(ctx context.Context, m outbox.Message) error {
			return v.d.PG.RunInTx(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, m) })
		}
	} else {
		w, err := outbox.NewWriter(v.d.SQL, outbox.WriterConfig{})
		if err != nil {
			v.t.Fatal(err)
		}
		write = func(ctx context.Context, m outbox.Message) error {
			return v.d.SQL.RunInTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, m) })
		}
	}
	var n atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var errs atomic.Value
	for p := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				m := outbox.Message{MsgID: fmt.Sprintf("vol-writer-%d-%d-%d", time.Now().UnixNano(), p, i), Topic: "topic-w", Payload: []byte(`{"order":1}`)}
				err := write(ctx, m)
				if err != nil && ctx.Err() == nil {
					errs.Store(err)
					return
				}
				if err == nil {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := errs.Load().(error); err != nil {
		v.t.Fatal(err)
	}
	fmt.Printf("volume writer: %d messages in 5s from 8 producers, %.0f/s\n", n.Load(), float64(n.Load())/5)
}

// addNew inserts n NEW rows created now, in one statement.
func (v *volume) addNew(ctx context.Context, n int) {
	v.t.Helper()
	first := v.added
	v.added += int64(n)
	if v.run == "" {
		// msg_ids of their own, so that the test can run again on the same load.
		v.run = strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	stmt := fmt.Sprintf(`INSERT INTO outbox (msg_id, topic, msg_key, payload)
SELECT 'vol-new-%s-' || (%d + i), 'topic-' || (i %% 8), 'key-' || (i %% 1000), jsonb_build_object('order', i, 'note', repeat('x', 120))
FROM generate_series(1, %d) AS i ORDER BY i`, v.run, first, n)
	if v.d.Dialect == "mysql" {
		stmt = fmt.Sprintf(`INSERT INTO outbox (msg_id, topic, msg_key, payload)
SELECT CONCAT('vol-new-%s-', %d + seq), CONCAT('topic-', seq %% 8), CONCAT('key-', seq %% 1000), JSON_OBJECT('order', seq, 'note', REPEAT('x', 120))
FROM seq_1_to_%d ORDER BY seq`, v.run, first, n)
	}
	if err := v.exec(ctx, stmt); err != nil {
		v.t.Fatal(err)
	}
}

// drainAll runs a relay with a publisher that drops every message until no
// row is pending, and returns how long it took. With cleanOlder above 0 a
// Cleaner (DutyCycle v.duty) deletes SENT rows older than it, 1000 a
// statement, meanwhile.
func (v *volume) drainAll(ctx context.Context, cleanOlder time.Duration) (time.Duration, int64) {
	v.t.Helper()
	st := v.sql()
	drop := outbox.PublishFunc(func(context.Context, outbox.Message) error { return nil })
	r, err := outbox.NewRelay(v.d.Store, drop, outbox.RelayConfig{BatchSize: 500})
	if err != nil {
		v.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var deleted atomic.Int64
	start := time.Now()
	wg.Add(1)
	go func() { defer wg.Done(); _ = r.Run(ctx) }()
	if cleanOlder > 0 {
		c, err := outbox.NewCleaner(v.d.Store, outbox.CleanerConfig{OlderThan: cleanOlder, DutyCycle: v.duty})
		if err != nil {
			v.t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, _ := c.RunOnce(ctx)
			deleted.Add(rep.Sent)
		}()
	}
	for {
		b, err := st.Backlog(ctx)
		if err != nil {
			v.t.Fatal(err)
		}
		if b.Pending == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(start)
	cancel()
	wg.Wait()
	return took, deleted.Load()
}

// relayWithCleaner drains the load's backlog, then relays v.drain fresh rows
// without and with a cleaner deleting the oldest day's SENT rows, A B A B,
// and prints the rates and the ratio.
func (v *volume) relayWithCleaner(ctx context.Context) {
	took, _ := v.drainAll(ctx, 0)
	fmt.Printf("volume relay: the writer's rows and the backlog of 10000 drained in %.2fs\n", took.Seconds())
	var alone, cleaning []float64
	for k := 1; k <= 2; k++ {
		v.addNew(ctx, v.drain)
		took, _ := v.drainAll(ctx, 0)
		alone = append(alone, float64(v.drain)/took.Seconds())
		v.addNew(ctx, v.drain)
		older := time.Duration(v.days-k) * 24 * time.Hour
		took, deleted := v.drainAll(ctx, older)
		cleaning = append(cleaning, float64(v.drain)/took.Seconds())
		fmt.Printf("volume relay run %d: alone %.0f/s, with the cleaner at duty cycle %g %.0f/s (it deleted %d SENT rows older than %s, %.0f/s)\n",
			k, alone[k-1], v.duty, cleaning[k-1], deleted, older, float64(deleted)/took.Seconds())
	}
	fmt.Printf("volume relay: with/without the cleaner %.2f, %.2f\n", cleaning[0]/alone[0], cleaning[1]/alone[1])
}

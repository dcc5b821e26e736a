package drivertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func msg(id string) outbox.Message {
	return outbox.Message{MsgID: id, Topic: "test.topic", Payload: json.RawMessage(`{"id":"` + id + `"}`)}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// write inserts msgs in their own committed transaction.
func (s suite[TTx]) write(t *testing.T, env *Env[TTx], msgs ...outbox.Message) {
	t.Helper()
	if err := s.writeTx(ctxT(t), env, msgs...); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// writeTx is write for any goroutine: it returns the error.
func (s suite[TTx]) writeTx(ctx context.Context, env *Env[TTx], msgs ...outbox.Message) error {
	w, err := outbox.NewWriter(env.Driver, outbox.WriterConfig{})
	if err != nil {
		return err
	}
	tx, err := env.Begin(ctx)
	if err != nil {
		return err
	}
	if err := w.Write(ctx, tx, msgs...); err != nil {
		env.Rollback(ctx, tx)
		return err
	}
	return env.Commit(ctx, tx)
}

func manyMsgs(prefix string, n int) []outbox.Message {
	out := make([]outbox.Message, n)
	for i := range out {
		out[i] = msg(fmt.Sprintf("%s-%05d", prefix, i))
	}
	return out
}

func (s suite[TTx]) count(t *testing.T, env *Env[TTx], where string, args ...any) int64 {
	t.Helper()
	n, err := env.QueryInt(ctxT(t), "SELECT count(*) FROM outbox WHERE "+where, args...)
	if err != nil {
		t.Fatalf("count where %s: %v", where, err)
	}
	return n
}

// recorder is a publisher that remembers what it acked.
type recorder struct {
	mu   sync.Mutex
	got  []outbox.Message
	seen map[string]int
}

func (r *recorder) Publish(_ context.Context, msgs []outbox.Message) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]int{}
	}
	for _, m := range msgs {
		r.got = append(r.got, m)
		r.seen[m.MsgID]++
	}
	return nil
}

func (r *recorder) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.got))
	for i, m := range r.got {
		out[i] = m.MsgID
	}
	return out
}

func newRelay(t *testing.T, st outboxdriver.Store, pub outbox.Publisher, cfg outbox.RelayConfig) *outbox.Relay {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	if cfg.RetryBudget == 0 {
		// The suite's cases make messages DEAD on MaxRetries alone; the
		// budget has a case of its own.
		cfg.RetryBudget = -1
	}
	r, err := outbox.NewRelay(st, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// drain runs the relay until a batch comes back empty.
func drain(t *testing.T, r *outbox.Relay) (sent int) {
	t.Helper()
	ctx := ctxT(t)
	for i := 0; i < 10000; i++ {
		rep, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatalf("relay: %v", err)
		}
		if len(rep.Results) == 0 {
			return sent
		}
		sent += rep.Sent
	}
	t.Fatal("relay never ran dry")
	return 0
}

func (s suite[TTx]) testMigrate(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	v, err := env.Driver.SchemaVersion(ctx)
	if err != nil || v < 1 {
		t.Fatalf("schema version after migrate = %d, %v; want >= 1", v, err)
	}
	if err := env.Driver.Migrate(ctx); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	v2, _ := env.Driver.SchemaVersion(ctx)
	if v2 != v {
		t.Fatalf("version moved from %d to %d on a repeated migrate", v, v2)
	}
	// Several processes migrating fresh tables at once.
	d, err := env.WithTables(outbox.Tables{Outbox: "concurrent_outbox", Inbox: "concurrent_inbox"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = d.Migrate(ctx) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
	if v, _ := d.SchemaVersion(ctx); v < 1 {
		t.Fatalf("concurrent migrate left version %d", v)
	}
}

func (s suite[TTx]) testTables(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	for _, bad := range []string{"x;drop table outbox", "Outbox", "1abc", "out-box", "a b", strings.Repeat("a", 49), `o"x`} {
		if _, err := env.WithTables(outbox.Tables{Outbox: bad}); !errors.Is(err, outbox.ErrInvalidIdentifier) {
			t.Errorf("table %q: err = %v, want ErrInvalidIdentifier", bad, err)
		}
	}
	if _, err := env.WithTables(outbox.Tables{Outbox: "same", Inbox: "same"}); !errors.Is(err, outbox.ErrInvalidIdentifier) {
		t.Errorf("same names: err = %v", err)
	}
	d, err := env.WithTables(outbox.Tables{Outbox: "orders_outbox", Inbox: "orders_inbox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w, _ := outbox.NewWriter(d, outbox.WriterConfig{})
	if err := d.RunInTx(ctx, func(ctx context.Context, tx TTx) error { return w.Write(ctx, tx, msg("custom-1")) }); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if n := drain(t, newRelay(t, d, rec, outbox.RelayConfig{})); n != 1 {
		t.Fatalf("custom tables: relayed %d, want 1", n)
	}
	if got := s.count(t, env, "1 = 1"); got != 0 {
		t.Fatalf("default table got %d rows from a custom-table writer", got)
	}
	if n, err := env.QueryInt(ctx, "SELECT count(*) FROM orders_outbox WHERE status = 1"); err != nil || n != 1 {
		t.Fatalf("orders_outbox sent rows = %d, %v", n, err)
	}
}

func (s suite[TTx]) testSchemaMissing(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	d, err := env.WithTables(outbox.Tables{Outbox: "never_migrated", Inbox: "never_migrated_in"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: time.Minute}); !errors.Is(err, outbox.ErrSchemaMissing) {
		t.Fatalf("claim on missing tables: %v, want ErrSchemaMissing", err)
	}
	if _, err := d.Stats(ctx); !errors.Is(err, outbox.ErrSchemaMissing) {
		t.Fatalf("stats on missing tables: %v, want ErrSchemaMissing", err)
	}
	if v, err := d.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("schema version of missing tables = %d, %v; want 0, nil", v, err)
	}
}

func (s suite[TTx]) testWriter(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	w, _ := outbox.NewWriter(env.Driver, outbox.WriterConfig{})
	if err := env.Exec(ctx, "CREATE TABLE accounts (name VARCHAR(32) PRIMARY KEY, balance BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := env.Exec(ctx, "INSERT INTO accounts (name, balance) VALUES ('alice', 1000), ('bob', 0)"); err != nil {
		t.Fatal(err)
	}

	// Committed with the business change.
	full := outbox.Message{MsgID: "m-1", Topic: "account.transferred", Key: "alice",
		Payload: json.RawMessage(`{"from":"alice","to":"bob","amount":100,"note":"żółw 🐢"}`),
		Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "ünï"}}
	tx, err := env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.ExecTx(ctx, tx, "UPDATE accounts SET balance = balance - 100 WHERE name = ?", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, tx, full); err != nil {
		t.Fatal(err)
	}
	if err := env.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	got, err := env.Driver.GetMessage(ctx, "m-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Topic != full.Topic || got.Key != full.Key || got.Status != outbox.StatusNew || got.Retries != 0 || got.ID == 0 {
		t.Fatalf("stored message = %+v", got)
	}
	if !jsonEqual(got.Payload, full.Payload) {
		t.Fatalf("payload = %s, want %s", got.Payload, full.Payload)
	}
	if len(got.Headers) != 2 || got.Headers["traceparent"] != full.Headers["traceparent"] || got.Headers["tenant"] != "ünï" {
		t.Fatalf("headers = %v", got.Headers)
	}
	if got.CreatedAt.IsZero() || time.Since(got.CreatedAt) > time.Minute || time.Since(got.CreatedAt) < -time.Minute {
		t.Fatalf("created_at = %v, not near now", got.CreatedAt)
	}

	// Rolled back with the business change: nothing invented.
	tx, _ = env.Begin(ctx)
	if err := w.Write(ctx, tx, msg("m-rolled-back"), msg("m-rolled-back-2")); err != nil {
		t.Fatal(err)
	}
	if err := env.Rollback(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Driver.GetMessage(ctx, "m-rolled-back"); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("rolled-back message: %v, want ErrNotFound", err)
	}

	// Many at once keep their order in ids.
	batch := manyMsgs("many", 50)
	s.write(t, env, batch...)
	rec := &recorder{}
	drain(t, newRelay(t, env.Driver, rec, outbox.RelayConfig{BatchSize: 17}))
	ids := rec.ids()
	if len(ids) != 51 || ids[0] != "m-1" {
		t.Fatalf("relayed %d messages starting %v", len(ids), ids[:min(3, len(ids))])
	}
	for i, m := range batch {
		if ids[i+1] != m.MsgID {
			t.Fatalf("position %d: relayed %s, want %s (id order)", i+1, ids[i+1], m.MsgID)
		}
	}
	// Maximum sizes are accepted.
	big := outbox.Message{MsgID: strings.Repeat("é", 64), Topic: strings.Repeat("t", 128), Key: strings.Repeat("k", 128),
		Payload: json.RawMessage(`"` + strings.Repeat("x", 100000) + `"`)}
	s.write(t, env, big)
	if got, err := env.Driver.GetMessage(ctx, big.MsgID); err != nil || len(got.Payload) < 100000 {
		t.Fatalf("64-character msg_id: %v", err)
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

func (s suite[TTx]) testWriterValidation(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	w, err := outbox.NewWriter(env.Driver, outbox.WriterConfig{MaxPayloadBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.NewWriter(env.Driver, outbox.WriterConfig{MaxPayloadBytes: -1}); err == nil {
		t.Fatal("negative MaxPayloadBytes accepted")
	}
	ok := msg("valid")
	cases := []struct {
		name  string
		m     outbox.Message
		field string
		is    error
	}{
		{"empty msg_id", outbox.Message{Topic: "t", Payload: json.RawMessage(`{}`)}, "msg_id", outbox.ErrInvalidMessage},
		{"long msg_id", outbox.Message{MsgID: strings.Repeat("a", 65), Topic: "t", Payload: json.RawMessage(`{}`)}, "msg_id", outbox.ErrInvalidMessage},
		{"bad utf8 msg_id", outbox.Message{MsgID: "a\xffb", Topic: "t", Payload: json.RawMessage(`{}`)}, "msg_id", outbox.ErrInvalidMessage},
		{"empty topic", outbox.Message{MsgID: "a", Payload: json.RawMessage(`{}`)}, "topic", outbox.ErrInvalidMessage},
		{"long topic", outbox.Message{MsgID: "a", Topic: strings.Repeat("t", 129), Payload: json.RawMessage(`{}`)}, "topic", outbox.ErrInvalidMessage},
		{"long key", outbox.Message{MsgID: "a", Topic: "t", Key: strings.Repeat("k", 129), Payload: json.RawMessage(`{}`)}, "key", outbox.ErrInvalidMessage},
		{"empty payload", outbox.Message{MsgID: "a", Topic: "t"}, "payload", outbox.ErrInvalidMessage},
		{"invalid json", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage(`{"a":`)}, "payload", outbox.ErrInvalidMessage},
		{"too large", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage(`"` + strings.Repeat("x", 1000) + `"`)}, "payload", outbox.ErrPayloadTooLarge},
		{"header name", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage(`{}`), Headers: map[string]string{"X-Trace": "1"}}, "headers", outbox.ErrInvalidMessage},
		{"reserved header", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage(`{}`), Headers: map[string]string{"type": "x"}}, "headers", outbox.ErrInvalidMessage},
		// Valid JSON to encoding/json, refused by a database's JSON type: on
		// PostgreSQL the INSERT would abort the caller's transaction.
		{"NUL escape", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage(`{"a":"x\u0000y"}`)}, "payload", outbox.ErrInvalidMessage},
		{"NUL escape in a key", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage(`{"\u0000":1}`)}, "payload", outbox.ErrInvalidMessage},
		{"lone high surrogate", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage(`"\ud800"`)}, "payload", outbox.ErrInvalidMessage},
		{"high surrogate, then no low one", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage(`"\ud800\u0041"`)}, "payload", outbox.ErrInvalidMessage},
		{"lone low surrogate", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage(`["\udc00"]`)}, "payload", outbox.ErrInvalidMessage},
		{"bytes not UTF-8", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage("\"a\xffb\"")}, "payload", outbox.ErrInvalidMessage},
		{"number too large", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage(`{"n":1e1000000}`)}, "payload", outbox.ErrInvalidMessage},
		{"number with too many digits", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage(`[1234e131069]`)}, "payload", outbox.ErrInvalidMessage},
		{"zero with too large an exponent", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage(`{"a":0e1073741823}`)}, "payload", outbox.ErrInvalidMessage},
		{"number too precise", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage(`-1.55e-16382`)}, "payload", outbox.ErrInvalidMessage},
		{"header value with NUL", outbox.Message{MsgID: "a", Topic: "t", Payload: json.RawMessage(`{}`), Headers: map[string]string{"trace": "x\x00y"}}, "headers", outbox.ErrInvalidMessage},
	}
	tx, err := env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A failure below must not leave the transaction holding locks that
	// the clean-up would wait for.
	defer func() { _ = env.Rollback(context.WithoutCancel(ctx), tx) }()
	for _, c := range cases {
		err := w.Write(ctx, tx, ok, c.m)
		var ve *outbox.ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, c.is) || !errors.Is(err, outbox.ErrInvalidMessage) {
			t.Errorf("%s: err = %v, want a ValidationError that Is %v", c.name, err, c.is)
			continue
		}
		if ve.Field != c.field || ve.Index != 1 {
			t.Errorf("%s: field %q index %d, want %q index 1", c.name, ve.Field, ve.Index, c.field)
		}
	}
	// Nothing of a rejected call was written, and the transaction goes on.
	if err := w.Write(ctx, tx, msg("after-errors")); err != nil {
		t.Fatalf("transaction unusable after validation errors: %v", err)
	}
	// At the edges of what every database stores: accepted, and stored.
	edges := []string{`"\ud83d\ude00 \u00e9 \\u0000"`, `1e131071`, `-123e131069`, `1.5e-16382`, `0e1073741822`, `0.00012e131069`, `[1E+5,-0.0,1e-16383]`}
	for i, p := range edges {
		m := outbox.Message{MsgID: fmt.Sprintf("edge-%d", i), Topic: "t", Payload: json.RawMessage(p)}
		if err := w.Write(ctx, tx, m); err != nil {
			t.Errorf("payload %s: %v", p, err)
		}
	}
	// Nested 40 deep: PostgreSQL and SQLite store it; MariaDB's json_valid
	// allows 31 levels, and its refusal must be a ValidationError too, alone
	// and among others, with the transaction still usable.
	deep := func(id string) outbox.Message {
		return outbox.Message{MsgID: id, Topic: "t", Payload: json.RawMessage(strings.Repeat("[", 40) + strings.Repeat("]", 40))}
	}
	want := int64(1 + len(edges))
	for _, call := range [][]outbox.Message{{deep("deep-1")}, {msg("beside-deep"), deep("deep-2")}} {
		err := w.Write(ctx, tx, call...)
		if env.Driver.Dialect() != "mysql" {
			if err != nil {
				t.Fatalf("%d levels of nesting: %v", 40, err)
			}
			want += int64(len(call))
			continue
		}
		wantIndex := 0 // the message's; -1 when a statement of several rows was refused
		if len(call) > 1 {
			wantIndex = -1
		}
		var ve *outbox.ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, outbox.ErrInvalidMessage) || ve.Field != "message" || ve.Index != wantIndex {
			t.Fatalf("MariaDB refusing %d levels of nesting (%d messages): %v, want a ValidationError", 40, len(call), err)
		}
	}
	if err := w.Write(ctx, tx, msg("after-refusals")); err != nil {
		t.Fatalf("transaction unusable after the database refused a message: %v", err)
	}
	want++
	if err := env.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if n := s.count(t, env, "1 = 1"); n != want {
		t.Fatalf("%d rows after rejected writes, %d at the edges and the nested ones, want %d", n, len(edges), want)
	}
}

func (s suite[TTx]) testWriterDuplicate(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	w, _ := outbox.NewWriter(env.Driver, outbox.WriterConfig{})
	s.write(t, env, msg("dup-1"), msg("dup-2"))
	if err := env.Exec(ctx, "CREATE TABLE orders (id VARCHAR(32) PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}

	tx, err := env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.ExecTx(ctx, tx, "INSERT INTO orders (id) VALUES (?)", "o-1"); err != nil {
		t.Fatal(err)
	}
	// One duplicate, alone.
	err = w.Write(ctx, tx, msg("dup-1"))
	var de *outbox.DuplicateError
	if !errors.Is(err, outbox.ErrDuplicate) || !errors.As(err, &de) || len(de.MsgIDs) != 1 || de.MsgIDs[0] != "dup-1" {
		t.Fatalf("single duplicate: %v", err)
	}
	// A duplicate among new ones: none of the call is inserted.
	err = w.Write(ctx, tx, msg("new-a"), msg("dup-2"), msg("new-b"))
	if !errors.As(err, &de) || len(de.MsgIDs) != 1 || de.MsgIDs[0] != "dup-2" {
		t.Fatalf("duplicate in batch: %v", err)
	}
	// Repeated within one call.
	if err := w.Write(ctx, tx, msg("twice"), msg("twice")); !errors.Is(err, outbox.ErrDuplicate) {
		t.Fatalf("repeated msg_id in one call: %v", err)
	}
	// The transaction is still usable: more work, then commit.
	if err := env.ExecTx(ctx, tx, "INSERT INTO orders (id) VALUES (?)", "o-2"); err != nil {
		t.Fatalf("transaction unusable after duplicate: %v", err)
	}
	if err := w.Write(ctx, tx, msg("new-c")); err != nil {
		t.Fatalf("write after duplicate: %v", err)
	}
	if err := env.Commit(ctx, tx); err != nil {
		t.Fatalf("commit after duplicate: %v", err)
	}
	if n, _ := env.QueryInt(ctx, "SELECT count(*) FROM orders"); n != 2 {
		t.Fatalf("orders = %d, want 2", n)
	}
	for id, want := range map[string]int64{"new-a": 0, "new-b": 0, "new-c": 1, "dup-1": 1, "dup-2": 1} {
		if n := s.count(t, env, "msg_id = ?", id); n != want {
			t.Errorf("%s: %d rows, want %d", id, n, want)
		}
	}
	// msg_id is case-sensitive everywhere.
	s.write(t, env, msg("DUP-1"))

	if env.ConcurrentWriters {
		// Two open transactions insert the same msg_id: the second learns of the
		// duplicate when the first commits, and its own transaction survives.
		tx1, _ := env.Begin(ctx)
		tx2, _ := env.Begin(ctx)
		if err := w.Write(ctx, tx1, msg("race")); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.Write(ctx, tx2, msg("race")) }()
		time.Sleep(200 * time.Millisecond)
		if err := env.Commit(ctx, tx1); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, outbox.ErrDuplicate) {
			t.Fatalf("concurrent duplicate: %v", err)
		}
		if err := w.Write(ctx, tx2, msg("race-2")); err != nil {
			t.Fatalf("tx unusable after concurrent duplicate: %v", err)
		}
		if err := env.Commit(ctx, tx2); err != nil {
			t.Fatal(err)
		}
	}
}

func (s suite[TTx]) testSidecar(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	// Any program may insert with plain SQL and rely on the defaults.
	if err := env.Exec(ctx, `INSERT INTO outbox (msg_id, topic, payload) VALUES ('side-1', 'order.paid', '{"order":42}')`); err != nil {
		t.Fatal(err)
	}
	if err := env.Exec(ctx, `INSERT INTO outbox (msg_id, topic, msg_key, payload, headers) VALUES ('side-2', 'order.paid', 'k1', '{"order":43}', '{"tenant":"a","attempt":2}')`); err != nil {
		t.Fatal(err)
	}
	// The schema itself rejects what the Writer would reject.
	for _, bad := range []string{
		`INSERT INTO outbox (msg_id, topic, payload) VALUES ('side-1', 't', '{}')`,
		`INSERT INTO outbox (msg_id, topic, payload) VALUES ('', 't', '{}')`,
		`INSERT INTO outbox (msg_id, topic, payload) VALUES ('bad-json', 't', '{not json')`,
		`INSERT INTO outbox (msg_id, topic, payload, status) VALUES ('bad-status', 't', '{}', 7)`,
	} {
		if err := env.Exec(ctx, bad); err == nil {
			t.Errorf("schema accepted: %s", bad)
		}
	}
	rec := &recorder{}
	if n := drain(t, newRelay(t, env.Driver, rec, outbox.RelayConfig{})); n != 2 {
		t.Fatalf("relayed %d sidecar rows, want 2", n)
	}
	if rec.got[1].Key != "k1" || rec.got[1].Headers["tenant"] != "a" || rec.got[1].Headers["attempt"] != "2" || !jsonEqual(rec.got[0].Payload, []byte(`{"order":42}`)) {
		t.Fatalf("sidecar messages relayed as %+v", rec.got)
	}
}

// testClaimPlan checks that the claims go through their indexes: a planner
// may skip a partial index (SQLite does when the query does not repeat its
// condition literally), and then every claim scans the whole table.
// PostgreSQL has no pending index (its SENT update is HOT): the rescan must
// walk the primary key and the requeued index, the claim from a cursor the
// primary key, and neither may scan the table.
func (s suite[TTx]) testClaimPlan(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("plan", 2000)...)
	drain(t, newRelay(t, env.Driver, &recorder{}, outbox.RelayConfig{BatchSize: 1000}))
	s.write(t, env, manyMsgs("plan-new", 50)...)
	ex := engine(t, env.Driver)
	plan, err := ex.ExplainClaim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if env.Driver.Dialect() != "postgres" {
		if !strings.Contains(plan, "outbox_pending_idx") {
			t.Fatalf("the claim does not use the pending index:\n%s", plan)
		}
		return
	}
	rescan, cursor, ok := strings.Cut(plan, "-- from a cursor\n")
	if !ok {
		t.Fatalf("no plan of the claim from a cursor:\n%s", plan)
	}
	for _, c := range []struct {
		name, plan string
		want       []string
	}{
		// The leases are looked up and recorded by their chunk.
		{"rescan", rescan, []string{"outbox_pkey", "outbox_requeued_idx", "outbox_claims_pkey"}},
		{"claim from a cursor", cursor, []string{"outbox_pkey", "outbox_claims_pkey"}},
	} {
		for _, w := range c.want {
			if !strings.Contains(c.plan, w) {
				t.Errorf("the %s does not use %s:\n%s", c.name, w, c.plan)
			}
		}
		for _, bad := range []string{"Seq Scan on outbox ", "Sort", "Bitmap"} {
			if strings.Contains(c.plan, bad) {
				t.Errorf("the %s plan has %q:\n%s", c.name, bad, c.plan)
			}
		}
	}
}

// runUntilNoneNew runs r.Run until no row is NEW (or within has passed, after
// which the caller's checks fail), cancels it, and fails the test unless Run
// then returns nil.
func (s suite[TTx]) runUntilNoneNew(t *testing.T, ctx context.Context, env *Env[TTx], r *outbox.Relay, within time.Duration) {
	t.Helper()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	deadline := time.Now().Add(within)
	for s.count(t, env, "status = 0") > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v on cancel", err)
	}
}

// testRelaySlowBroker runs Relay.Run against a broker slower than the
// claim, where Run claims the next batch while the broker has the previous
// one (as far as the store's outboxdriver.ClaimOverlap allows): the claim held ahead
// must never hold up the previous batch's mark, and every row goes out once.
func (s suite[TTx]) testRelaySlowBroker(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("slow", 125)...)
	rec := &recorder{}
	pub := outbox.BatchPublishFunc(func(ctx context.Context, msgs []outbox.Message) []error {
		time.Sleep(30 * time.Millisecond) // far slower than a claim of 10 rows
		return rec.Publish(ctx, msgs)
	})
	r := newRelay(t, env.Driver, pub, outbox.RelayConfig{BatchSize: 10})
	// One batch first, so that SENT rows sit in the table as they do in a
	// running system (with MySQL they change which index the marks use).
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	// 12 batches take 0.4 s of publishing; a mark stuck behind a lock would
	// take the database's lock timeout (50 s for InnoDB) to give up.
	s.runUntilNoneNew(t, ctx, env, r, 15*time.Second)
	if n := s.count(t, env, "status = 1"); n != 125 {
		t.Fatalf("SENT = %d after 15 s, want 125: a mark waited on the claim held ahead of it", n)
	}
	for id, c := range rec.seen {
		if c != 1 {
			t.Fatalf("%s published %d times", id, c)
		}
	}
}

func (s suite[TTx]) testRelay(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("r", 25)...)
	rec := &recorder{}
	r := newRelay(t, env.Driver, rec, outbox.RelayConfig{BatchSize: 10})
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent != 10 || len(rep.Results) != 10 || rep.Results[0].Message.MsgID != "r-00000" {
		t.Fatalf("first batch: sent %d of %d", rep.Sent, len(rep.Results))
	}
	if n := s.count(t, env, "status = 1 AND sent_at IS NOT NULL"); n != 10 {
		t.Fatalf("SENT rows with sent_at: %d, want 10", n)
	}
	m := rec.got[0]
	if m.ID == 0 || m.Topic != "test.topic" || m.CreatedAt.IsZero() || !jsonEqual(m.Payload, []byte(`{"id":"r-00000"}`)) {
		t.Fatalf("published message = %+v", m)
	}
	// Run loops at once on full batches and stops cleanly on cancel.
	s.runUntilNoneNew(t, ctx, env, r, 20*time.Second)
	if n := s.count(t, env, "status = 1"); n != 25 {
		t.Fatalf("SENT = %d, want 25", n)
	}
	for id, c := range rec.seen {
		if c != 1 {
			t.Fatalf("%s published %d times", id, c)
		}
	}
}

func (s suite[TTx]) testRelayFailures(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, msg("ok-1"), msg("poison"), msg("ok-2"))
	var attempts atomic.Int32
	pub := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		if m.MsgID == "poison" {
			attempts.Add(1)
			return errors.New("broker refused: message too large")
		}
		return nil
	})
	r := newRelay(t, env.Driver, pub, outbox.RelayConfig{MaxRetries: 3, RetryBase: 300 * time.Millisecond, RetryMax: 300 * time.Millisecond})
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sent != 2 || rep.Retried != 1 {
		t.Fatalf("first batch: %+v", rep)
	}
	p, err := env.Driver.GetMessage(ctx, "poison")
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != outbox.StatusNew || p.Retries != 1 || !strings.Contains(p.LastError, "too large") {
		t.Fatalf("after one failure: status %v retries %d last_error %q", p.Status, p.Retries, p.LastError)
	}
	if d := p.NextRetryAt.Sub(p.CreatedAt); d < 100*time.Millisecond {
		t.Fatalf("next_retry_at only %s after created_at; backoff not applied", d)
	}
	// Not due yet: the next batch is empty.
	if rep, _ := r.RunOnce(ctx); len(rep.Results) != 0 {
		t.Fatalf("message retried before its next_retry_at: %+v", rep)
	}
	for i := 0; i < 2; i++ {
		time.Sleep(400 * time.Millisecond)
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	p, _ = env.Driver.GetMessage(ctx, "poison")
	if p.Status != outbox.StatusDead || p.Retries != 3 || attempts.Load() != 3 {
		t.Fatalf("after 3 failures: status %v retries %d attempts %d, want DEAD 3 3", p.Status, p.Retries, attempts.Load())
	}
	// dead_at: the third attempt, after two backoffs of 100ms or more.
	if p.DeadAt.Before(p.CreatedAt.Add(200 * time.Millisecond)) {
		t.Fatalf("dead_at %s, created_at %s: the DEAD row does not record when it became DEAD", p.DeadAt, p.CreatedAt)
	}
	time.Sleep(400 * time.Millisecond)
	if rep, _ := r.RunOnce(ctx); len(rep.Results) != 0 {
		t.Fatal("a DEAD message was claimed again")
	}
	if n := s.count(t, env, "status = 1"); n != 2 {
		t.Fatalf("poison message held back the others: SENT = %d", n)
	}
}

// testDueBehindBackoff: rows waiting out a long backoff, ahead of a row that
// is due, do not hide it from the claim, however many of them there are per
// batch (the claim must count only due rows towards its limit).
func (s suite[TTx]) testDueBehindBackoff(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	msgs := append(manyMsgs("wait", 40), msg("due"))
	s.write(t, env, msgs...)
	// First pass: every "wait" message is refused (retried in an hour), and
	// "due" meets an unreachable broker (released: due again at once).
	first := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		if m.MsgID == "due" {
			return outbox.Unavailable(errors.New("connection refused"))
		}
		return errors.New("refused")
	})
	r := newRelay(t, env.Driver, first, outbox.RelayConfig{RetryBase: time.Hour, RetryMax: time.Hour})
	if rep, err := r.RunOnce(ctx); err != nil || rep.Retried != 40 {
		t.Fatalf("first pass: %+v, %v; want 40 retried", rep, err)
	}
	// A relay with a batch of one: 40 rows not due lie before the due one.
	rec := &recorder{}
	r = newRelay(t, env.Driver, rec, outbox.RelayConfig{BatchSize: 1})
	for i := 0; i < 3 && len(rec.ids()) == 0; i++ {
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := rec.ids(); len(got) != 1 || got[0] != "due" {
		t.Fatalf("claims with rows in backoff ahead of a due one published %v, want [due]", got)
	}
	if n := s.count(t, env, "status = 0 AND retries = 1"); n != 40 {
		t.Fatalf("rows still waiting out their backoff = %d, want 40", n)
	}
}

// testBackoffFromFailure: a failed message's backoff, and a DEAD message's
// dead_at, count from when the failure was recorded, not from when the batch
// was claimed: a slow broker must not eat the backoff while it answers.
func (s suite[TTx]) testBackoffFromFailure(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	const slow = 700 * time.Millisecond
	refuseSlowly := outbox.PublishFunc(func(context.Context, outbox.Message) error {
		time.Sleep(slow) // one message per batch here
		return errors.New("refused after a while")
	})
	s.write(t, env, msg("slow-retry"))
	// Equal jitter: the delay is 500 ms to 1 s, so next_retry_at is at least
	// created_at + 700 ms + 500 ms; counted from the claim it could be 1 s at most.
	r := newRelay(t, env.Driver, refuseSlowly, outbox.RelayConfig{RetryBase: time.Second, RetryMax: time.Second})
	if rep, err := r.RunOnce(ctx); err != nil || rep.Retried != 1 {
		t.Fatalf("RunOnce: %+v, %v; want 1 retried", rep, err)
	}
	m, err := env.Driver.GetMessage(ctx, "slow-retry")
	if err != nil {
		t.Fatal(err)
	}
	if d := m.NextRetryAt.Sub(m.CreatedAt); d < slow+500*time.Millisecond-50*time.Millisecond {
		t.Fatalf("next_retry_at is %s after created_at, want at least %s (the publish took %s, the backoff is 500ms or more)", d, slow+500*time.Millisecond, slow)
	}
	s.write(t, env, msg("slow-dead"))
	r = newRelay(t, env.Driver, refuseSlowly, outbox.RelayConfig{MaxRetries: 1})
	if rep, err := r.RunOnce(ctx); err != nil || rep.Dead != 1 {
		t.Fatalf("RunOnce: %+v, %v; want 1 dead", rep, err)
	}
	if m, err = env.Driver.GetMessage(ctx, "slow-dead"); err != nil {
		t.Fatal(err)
	}
	if d := m.DeadAt.Sub(m.CreatedAt); d < slow-50*time.Millisecond {
		t.Fatalf("dead_at is %s after created_at, want at least %s (the publish that failed took that long)", d, slow)
	}
}

// testErrorTextStored: whatever bytes a publisher's error holds (a NUL, bytes
// that are not UTF-8, a multi-byte character where the text is cut), the
// failure is recorded and the row takes its retry path; an unstorable text
// would fail the mark and publish the whole batch again and again.
func (s suite[TTx]) testErrorTextStored(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, msg("bad-bytes"), msg("fine"))
	long := strings.Repeat("a", 1999) + "é and more"
	texts := map[string]string{"bad-bytes": "broker said \x00\xff\xfe: " + long}
	refuse := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		if t, ok := texts[m.MsgID]; ok {
			return errors.New(t)
		}
		return nil
	})
	r := newRelay(t, env.Driver, refuse, outbox.RelayConfig{RetryBase: time.Hour, RetryMax: time.Hour})
	rep, err := r.RunOnce(ctx)
	if err != nil || rep.Sent != 1 || rep.Retried != 1 {
		t.Fatalf("RunOnce: %+v, %v; want 1 sent and 1 retried", rep, err)
	}
	m, err := env.Driver.GetMessage(ctx, "bad-bytes")
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != outbox.StatusNew || m.Retries != 1 {
		t.Fatalf("after the failure: status %v retries %d, want NEW 1", m.Status, m.Retries)
	}
	if !utf8.ValidString(m.LastError) || strings.ContainsRune(m.LastError, 0) || len(m.LastError) > 2000 ||
		!strings.HasPrefix(m.LastError, "broker said ") {
		t.Fatalf("last_error %q (%d bytes): want valid UTF-8 without NUL, at most 2000 bytes", m.LastError[:min(len(m.LastError), 40)], len(m.LastError))
	}
	if n := s.count(t, env, "status = 1"); n != 1 {
		t.Fatalf("SENT rows = %d, want 1: the batch's mark did not hold", n)
	}
}

func (s suite[TTx]) testRelayUnavailable(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("u", 5)...)
	var calls atomic.Int32
	down := outbox.BatchPublishFunc(func(_ context.Context, msgs []outbox.Message) []error {
		calls.Add(1)
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = outbox.Unavailable(errors.New("dial tcp 127.0.0.1:1: connection refused"))
		}
		return errs
	})
	r := newRelay(t, env.Driver, down, outbox.RelayConfig{MaxRetries: 1, PauseBase: 50 * time.Millisecond, PauseMax: 100 * time.Millisecond})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	time.Sleep(600 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c := calls.Load(); c < 2 || c > 20 {
		t.Fatalf("publisher called %d times in 600ms; want a paused, backing-off relay", c)
	}
	// MaxRetries is 1, yet nothing is DEAD and no retry was spent.
	if n := s.count(t, env, "status = 0 AND retries = 0"); n != 5 {
		t.Fatalf("NEW rows with no retries spent = %d, want 5", n)
	}
	// The broker comes back.
	rec := &recorder{}
	if n := drain(t, newRelay(t, env.Driver, rec, outbox.RelayConfig{})); n != 5 {
		t.Fatalf("after the broker returned: relayed %d", n)
	}
}

func (s suite[TTx]) testRelayStop(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("stop", 3)...)
	inPublish := make(chan struct{})
	release := make(chan struct{})
	pub := outbox.BatchPublishFunc(func(pctx context.Context, msgs []outbox.Message) []error {
		close(inPublish)
		<-release
		if pctx.Err() != nil {
			return []error{pctx.Err(), pctx.Err(), pctx.Err()}
		}
		return nil
	})
	r := newRelay(t, env.Driver, pub, outbox.RelayConfig{})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	<-inPublish
	cancel() // SIGTERM while the batch is at the broker
	time.Sleep(50 * time.Millisecond)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := s.count(t, env, "status = 1"); n != 3 {
		t.Fatalf("batch in flight at stop: %d SENT, want 3", n)
	}
}

func (s suite[TTx]) testTwoRelays(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	const n = 3000
	s.write(t, env, manyMsgs("two", n)...)
	var mu sync.Mutex
	seen := map[string]int{}
	var slowdown atomic.Bool
	pub := func(name string) outbox.Publisher {
		return outbox.BatchPublishFunc(func(_ context.Context, msgs []outbox.Message) []error {
			mu.Lock()
			for _, m := range msgs {
				seen[m.MsgID]++
			}
			mu.Unlock()
			if slowdown.Load() {
				time.Sleep(time.Millisecond)
			}
			return nil
		})
	}
	slowdown.Store(true)
	var wg sync.WaitGroup
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	reports := make([]int, 2)
	for i := range 2 {
		r := newRelay(t, env.Driver, pub(fmt.Sprint(i)), outbox.RelayConfig{BatchSize: 50, Interval: 10 * time.Millisecond})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				rep, err := r.RunOnce(runCtx)
				if err != nil && runCtx.Err() == nil {
					t.Errorf("relay %d: %v", i, err)
					return
				}
				reports[i] += rep.Sent
				if len(rep.Results) == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if reports[0] == 0 || reports[1] == 0 {
		t.Logf("one relay did all the work: %v", reports)
	}
	if len(seen) != n {
		t.Fatalf("published %d distinct messages, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("%s published %d times by two relays", id, c)
		}
	}
	if got := s.count(t, env, "status = 1"); got != n {
		t.Fatalf("SENT = %d, want %d", got, n)
	}
}

func (s suite[TTx]) testLateCommit(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	w, _ := outbox.NewWriter(env.Driver, outbox.WriterConfig{})
	rec := &recorder{}
	r := newRelay(t, env.Driver, rec, outbox.RelayConfig{})
	if !env.ConcurrentWriters {
		// Writers take turns: a relay that arrives while a writer's transaction
		// is open waits for it and then sees its row.
		tx, _ := env.Begin(ctx)
		if err := w.Write(ctx, tx, msg("slow")); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := r.RunOnce(ctx); done <- err }()
		time.Sleep(200 * time.Millisecond)
		if err := env.Commit(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		drain(t, r)
		if len(rec.seen) != 1 || rec.seen["slow"] != 1 {
			t.Fatalf("published %v", rec.seen)
		}
		return
	}
	// A long transaction takes a low id, later ones commit first and are
	// relayed; the long one commits last and must not be skipped.
	slow, err := env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, slow, msg("slow")); err != nil {
		t.Fatal(err)
	}
	s.write(t, env, msg("fast-1"), msg("fast-2"))
	drain(t, r)
	if rec.seen["fast-2"] != 1 || rec.seen["slow"] != 0 {
		t.Fatalf("before the slow commit: %v", rec.seen)
	}
	if err := env.Commit(ctx, slow); err != nil {
		t.Fatal(err)
	}
	s.write(t, env, msg("fast-3"))
	drain(t, r)
	if rec.seen["slow"] != 1 || rec.seen["fast-3"] != 1 {
		t.Fatalf("late commit skipped: %v", rec.seen)
	}
	slowMsg, _ := env.Driver.GetMessage(ctx, "slow")
	fast, _ := env.Driver.GetMessage(ctx, "fast-2")
	if slowMsg.ID > fast.ID {
		t.Fatalf("test did not exercise a late commit: slow id %d > fast id %d", slowMsg.ID, fast.ID)
	}
}

// testWriterBesideClaims: a relay's claim stays open while the broker has
// the batch, and business transactions must go on meanwhile. On InnoDB at
// REPEATABLE READ the claim's next-key locks covered the gap where every new
// row goes: writers waited for the whole publish, and a mark that reached a
// waiting writer's new row deadlocked it (found by make chaos CHAOS_DB=mysql).
// Two claims are open, one from the start and one from a cursor, as with two
// relays; a writer commits; then both claims mark and commit.
func (s suite[TTx]) testWriterBesideClaims(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("claimed", 4)...)
	first, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 2, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Abort(context.WithoutCancel(ctx))
	if len(first.Messages()) != 2 {
		t.Fatalf("first claim: %d messages, want 2", len(first.Messages()))
	}
	second, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, AfterID: first.Messages()[1].ID, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Abort(context.WithoutCancel(ctx))
	// PostgreSQL locks chunks of ids, so the second claim may find the rest
	// held by the first.
	if n := len(second.Messages()); n > 2 {
		t.Fatalf("second claim (from a cursor): %d messages, want at most 2", n)
	}
	left := map[string]bool{"written-beside-claims": true, "claimed-00002": true, "claimed-00003": true}
	for _, m := range second.Messages() {
		delete(left, m.MsgID)
	}

	done := make(chan error, 1)
	go func() { done <- s.writeTx(ctx, env, msg("written-beside-claims")) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a business transaction beside open claims: %v", err)
		}
	case <-time.After(5 * time.Second):
		_ = first.Abort(context.WithoutCancel(ctx))
		_ = second.Abort(context.WithoutCancel(ctx))
		<-done
		t.Fatal("a business transaction waited more than 5s for the relay's open claims")
	}
	sent := func(c outboxdriver.Claim) []outbox.Outcome { return make([]outbox.Outcome, len(c.Messages())) } // OutcomeSent is 0
	if err := first.Finish(ctx, sent(first)); err != nil {
		t.Fatalf("mark of the first claim: %v", err)
	}
	if err := second.Finish(ctx, sent(second)); err != nil {
		t.Fatalf("mark of the second claim: %v", err)
	}
	third, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer third.Abort(context.WithoutCancel(ctx))
	got := map[string]bool{}
	for _, m := range third.Messages() {
		got[m.MsgID] = true
	}
	if !maps.Equal(got, left) {
		t.Fatalf("after both marks the claim found %v, want %v", got, left)
	}
}

// testCrash: the relay publishes, then dies before it marks. The rows are
// published again, and the consumer's inbox applies each once.
func (s suite[TTx]) testCrash(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, manyMsgs("crash", 5)...)
	var deliveries []outbox.Message
	lease := 400 * time.Millisecond
	claim, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	deliveries = append(deliveries, claim.Messages()...) // published...
	// ...and the process dies: its lease runs out.
	if c2, err := env.Driver.Claim(ctx, outboxdriver.ClaimParams{Limit: 10, Lease: lease}); err != nil || len(c2.Messages()) != 0 {
		t.Fatalf("leased rows were claimed again before the lease ran out: %v", err)
	}
	time.Sleep(lease + 100*time.Millisecond)
	if n := s.count(t, env, "status = 0 AND retries = 0"); n != 5 {
		t.Fatalf("after the crash: %d rows NEW with no retry spent, want 5", n)
	}
	rec := &recorder{}
	drain(t, newRelay(t, env.Driver, rec, outbox.RelayConfig{}))
	deliveries = append(deliveries, rec.got...)
	if len(deliveries) != 10 {
		t.Fatalf("%d deliveries, want 10 (each message twice)", len(deliveries))
	}
	// The consumer side, in the same database for the test.
	if err := env.Exec(ctx, "CREATE TABLE effects (msg_id VARCHAR(64) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	ib := outbox.NewInbox(env.Driver)
	applied := 0
	for _, m := range deliveries {
		ok, err := ib.Process(ctx, "billing", m.MsgID, func(ctx context.Context, tx TTx) error {
			return env.ExecTx(ctx, tx, "INSERT INTO effects (msg_id) VALUES (?)", m.MsgID)
		})
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			applied++
		}
	}
	if n, _ := env.QueryInt(ctx, "SELECT count(*) FROM effects"); applied != 5 || n != 5 {
		t.Fatalf("effects = %d (applied %d), want 5", n, applied)
	}
}

func (s suite[TTx]) testInbox(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	ib := outbox.NewInbox(env.Driver)
	if err := env.Exec(ctx, "CREATE TABLE points (name VARCHAR(32) PRIMARY KEY, n BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := env.Exec(ctx, "INSERT INTO points (name, n) VALUES ('bob', 0)"); err != nil {
		t.Fatal(err)
	}
	add := func(ctx context.Context, tx TTx) error {
		return env.ExecTx(ctx, tx, "UPDATE points SET n = n + 100 WHERE name = ?", "bob")
	}
	for i, want := range []bool{true, false, false} {
		applied, err := ib.Process(ctx, "points", "m-1", add)
		if err != nil || applied != want {
			t.Fatalf("delivery %d: applied=%v err=%v, want %v", i+1, applied, err, want)
		}
	}
	// Another consumer group applies it once too.
	if applied, err := ib.Process(ctx, "audit", "m-1", func(context.Context, TTx) error { return nil }); !applied || err != nil {
		t.Fatalf("second group: %v %v", applied, err)
	}
	// A failing handler records nothing; the redelivery applies it.
	boom := errors.New("handler failed")
	if applied, err := ib.Process(ctx, "points", "m-2", func(ctx context.Context, tx TTx) error {
		if err := add(ctx, tx); err != nil {
			return err
		}
		return boom
	}); applied || !errors.Is(err, boom) {
		t.Fatalf("failing handler: %v %v", applied, err)
	}
	if applied, err := ib.Process(ctx, "points", "m-2", add); !applied || err != nil {
		t.Fatalf("redelivery after failure: %v %v", applied, err)
	}
	if n, _ := env.QueryInt(ctx, "SELECT n FROM points WHERE name = 'bob'"); n != 200 {
		t.Fatalf("bob has %d points, want 200", n)
	}
	// MarkTx in the caller's own transaction.
	tx, _ := env.Begin(ctx)
	if fresh, err := ib.MarkTx(ctx, tx, "points", "m-1"); fresh || err != nil {
		t.Fatalf("MarkTx of a consumed message: %v %v", fresh, err)
	}
	if fresh, err := ib.MarkTx(ctx, tx, "points", "m-3"); !fresh || err != nil {
		t.Fatalf("MarkTx of a new message: %v %v", fresh, err)
	}
	if err := add(ctx, tx); err != nil {
		t.Fatalf("transaction unusable after a duplicate MarkTx: %v", err)
	}
	if err := env.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ group, id string }{{"", "m"}, {strings.Repeat("g", 65), "m"}, {"g", ""}, {"g", strings.Repeat("m", 65)}} {
		if _, err := ib.Process(ctx, c.group, c.id, add); !errors.Is(err, outbox.ErrInvalidMessage) {
			t.Errorf("Process(%q, %q): %v, want ErrInvalidMessage", c.group, c.id, err)
		}
	}
}

func (s suite[TTx]) testInboxConcurrent(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	ib := outbox.NewInbox(env.Driver)
	var runs atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				_, err := ib.Process(ctx, "g", fmt.Sprintf("c-%d", j), func(context.Context, TTx) error {
					runs.Add(1)
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if runs.Load() != 20 {
		t.Fatalf("handler ran %d times for 20 messages delivered 8 times each", runs.Load())
	}
}

func (s suite[TTx]) testAdmin(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.write(t, env, outbox.Message{MsgID: "a-1", Topic: "alpha", Payload: json.RawMessage(`1`)},
		outbox.Message{MsgID: "a-2", Topic: "alpha", Payload: json.RawMessage(`2`)},
		outbox.Message{MsgID: "b-1", Topic: "beta", Payload: json.RawMessage(`3`)},
		outbox.Message{MsgID: "b-2", Topic: "beta", Payload: json.RawMessage(`4`)},
		outbox.Message{MsgID: "c-1", Topic: "gamma", Payload: json.RawMessage(`5`)})
	fail := outbox.PublishFunc(func(_ context.Context, m outbox.Message) error {
		if m.MsgID == "a-1" || strings.HasPrefix(m.MsgID, "b-") {
			return errors.New("rejected by broker")
		}
		return nil
	})
	if _, err := newRelay(t, env.Driver, fail, outbox.RelayConfig{MaxRetries: 1}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := env.Exec(ctx, "INSERT INTO outbox (msg_id, topic, payload) VALUES ('p-1', 'alpha', '{}')"); err != nil {
		t.Fatal(err)
	}
	st, err := env.Driver.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Pending and Dead are exact; Sent is the id span's estimate: at least
	// the 2 SENT rows, at most every id handed out. Topics lists the topics
	// with NEW or DEAD rows: gamma has only a SENT one.
	if st.Pending != 1 || st.Dead != 3 || !st.SentEstimated || st.Sent < 2 || st.Sent > 6 || len(st.Topics) != 2 {
		t.Fatalf("stats = %+v", st)
	}
	if a := st.Topics[0]; a.Topic != "alpha" || a.Pending != 1 || a.Dead != 1 || a.OldestPendingAge < 0 || a.OldestPendingAge > time.Minute {
		t.Fatalf("alpha stats = %+v", a)
	}
	dead, err := env.Driver.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusDead})
	if err != nil || len(dead) != 3 || dead[0].MsgID != "a-1" || dead[0].LastError != "rejected by broker" || dead[0].Retries != 1 ||
		dead[0].DeadAt.Before(dead[0].CreatedAt) {
		t.Fatalf("dead list = %+v, %v", dead, err)
	}
	if beta, _ := env.Driver.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusDead, Topic: "beta"}); len(beta) != 2 {
		t.Fatalf("dead list of beta = %d", len(beta))
	}
	if page, _ := env.Driver.ListMessages(ctx, outbox.ListFilter{Status: outbox.StatusDead, AfterID: dead[0].ID, Limit: 1}); len(page) != 1 || page[0].MsgID != "b-1" {
		t.Fatalf("paged dead list = %+v", page)
	}
	if _, err := env.Driver.GetMessage(ctx, "nope"); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	// Retry one by id: back to NEW with a fresh budget, and the retry recorded.
	n, err := env.Driver.RetryDead(ctx, outbox.DeadFilter{MsgIDs: []string{"a-1", "c-1"}}, "retried by test; previous error: ")
	if err != nil || n != 1 {
		t.Fatalf("retry a-1 (and SENT c-1, which must not move): %d, %v", n, err)
	}
	a1, _ := env.Driver.GetMessage(ctx, "a-1")
	if a1.Status != outbox.StatusNew || a1.Retries != 0 || !a1.DeadAt.IsZero() ||
		!strings.HasPrefix(a1.LastError, "retried by test") || !strings.Contains(a1.LastError, "rejected by broker") {
		t.Fatalf("after retry: %+v", a1)
	}
	if c1, _ := env.Driver.GetMessage(ctx, "c-1"); c1.Status != outbox.StatusSent {
		t.Fatalf("retry moved a SENT message to %v", c1.Status)
	}
	// Drop by topic with All; the NEW and SENT rows of the topic stay.
	if n, err := env.Driver.DropDead(ctx, outbox.DeadFilter{All: true, Topic: "beta"}); err != nil || n != 2 {
		t.Fatalf("drop beta: %d, %v", n, err)
	}
	if n, _ := env.Driver.DropDead(ctx, outbox.DeadFilter{MsgIDs: []string{"a-1", "p-1", "c-1"}}); n != 0 {
		t.Fatalf("drop removed %d non-DEAD rows", n)
	}
	if n, _ := env.Driver.DropDead(ctx, outbox.DeadFilter{}); n != 0 {
		t.Fatal("an empty filter dropped rows")
	}
	if got := s.count(t, env, "1 = 1"); got != 4 {
		t.Fatalf("%d rows left, want 4", got)
	}
	// Retry all.
	if err := env.Exec(ctx, "UPDATE outbox SET status = 2 WHERE msg_id = 'a-2'"); err != nil {
		t.Fatal(err)
	}
	if n, err := env.Driver.RetryDead(ctx, outbox.DeadFilter{All: true}, "all: "); err != nil || n != 1 {
		t.Fatalf("retry all: %d, %v", n, err)
	}
}

func (s suite[TTx]) testCleanup(t *testing.T) {
	t.Parallel()
	env := s.setup(t)
	ctx := ctxT(t)
	s.sentAndPending(t, env)
	// Nothing is old enough yet.
	if n, err := env.Driver.DeleteSent(ctx, time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("cleanup of fresh rows: %d, %v", n, err)
	}
	time.Sleep(300 * time.Millisecond)
	total := int64(0)
	for {
		n, err := env.Driver.DeleteSent(ctx, 200*time.Millisecond, 7)
		if err != nil {
			t.Fatal(err)
		}
		if n > 7 {
			t.Fatalf("a batch of 7 deleted %d", n)
		}
		total += n
		if n < 7 {
			break
		}
	}
	if total != 30 {
		t.Fatalf("cleanup deleted %d, want 30", total)
	}
	if n := s.count(t, env, "1 = 1"); n != 3 {
		t.Fatalf("%d rows left, want the 3 NEW/DEAD ones", n)
	}
	if _, err := env.Driver.DeleteSent(ctx, -time.Second, 10); err == nil {
		t.Fatal("negative older-than accepted")
	}
}

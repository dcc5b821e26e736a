package drivertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
)

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

// testWriterValidation checks the Writer's refusals, each a ValidationError
// that leaves the transaction usable, and the payloads at the edges of what
// every database stores.
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
	tx, err := env.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A failure below must not leave the transaction holding locks that
	// the clean-up would wait for.
	defer func() { _ = env.Rollback(context.WithoutCancel(ctx), tx) }()
	s.checkInvalidWrites(t, ctx, w, tx)
	// Nothing of a rejected call was written, and the transaction goes on.
	if err := w.Write(ctx, tx, msg("after-errors")); err != nil {
		t.Fatalf("transaction unusable after validation errors: %v", err)
	}
	edges := s.writeEdgePayloads(t, ctx, w, tx)
	want := int64(1 + edges)
	want += s.writeDeepPayloads(t, ctx, env, w, tx)
	if err := w.Write(ctx, tx, msg("after-refusals")); err != nil {
		t.Fatalf("transaction unusable after the database refused a message: %v", err)
	}
	want++
	if err := env.Commit(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if n := s.count(t, env, "1 = 1"); n != want {
		t.Fatalf("%d rows after rejected writes, %d at the edges and the nested ones, want %d", n, edges, want)
	}
}

// invalidMessage is a message the Writer refuses: the field it names and
// the error the refusal Is.
type invalidMessage struct {
	name  string
	m     outbox.Message
	field string
	is    error
}

// invalidMessages are the refusals of a Writer whose MaxPayloadBytes is 1000.
func invalidMessages() []invalidMessage {
	return []invalidMessage{
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
}

// checkInvalidWrites writes each of invalidMessages after a valid message
// in tx and checks the ValidationError: its field, and the index of the
// invalid message.
func (s suite[TTx]) checkInvalidWrites(t *testing.T, ctx context.Context, w *outbox.Writer[TTx], tx TTx) {
	ok := msg("valid")
	for _, c := range invalidMessages() {
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
}

// writeEdgePayloads writes in tx the payloads at the edges of what every
// database stores, each of which must be accepted, and returns how many it
// wrote.
func (s suite[TTx]) writeEdgePayloads(t *testing.T, ctx context.Context, w *outbox.Writer[TTx], tx TTx) int {
	// At the edges of what every database stores: accepted, and stored.
	edges := []string{`"\ud83d\ude00 \u00e9 \\u0000"`, `1e131071`, `-123e131069`, `1.5e-16382`, `0e1073741822`, `0.00012e131069`, `[1E+5,-0.0,1e-16383]`}
	for i, p := range edges {
		m := outbox.Message{MsgID: fmt.Sprintf("edge-%d", i), Topic: "t", Payload: json.RawMessage(p)}
		if err := w.Write(ctx, tx, m); err != nil {
			t.Errorf("payload %s: %v", p, err)
		}
	}
	return len(edges)
}

// writeDeepPayloads writes in tx payloads nested 40 deep, alone and beside
// another message, and returns how many rows that added: all of them, or
// none where MariaDB refuses them with a ValidationError.
func (s suite[TTx]) writeDeepPayloads(t *testing.T, ctx context.Context, env *Env[TTx], w *outbox.Writer[TTx], tx TTx) (added int64) {
	// Nested 40 deep: PostgreSQL and SQLite store it; MariaDB's json_valid
	// allows 31 levels, and its refusal must be a ValidationError too, alone
	// and among others, with the transaction still usable.
	deep := func(id string) outbox.Message {
		return outbox.Message{MsgID: id, Topic: "t", Payload: json.RawMessage(strings.Repeat("[", 40) + strings.Repeat("]", 40))}
	}
	for _, call := range [][]outbox.Message{{deep("deep-1")}, {msg("beside-deep"), deep("deep-2")}} {
		err := w.Write(ctx, tx, call...)
		if env.Driver.Dialect() != "mysql" {
			if err != nil {
				t.Fatalf("%d levels of nesting: %v", 40, err)
			}
			added += int64(len(call))
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
	return added
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

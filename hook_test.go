package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-go/outbox/outboxdriver"
)

// writeDriver is a Driver that keeps what the Writer inserts.
type writeDriver struct {
	outboxdriver.Store
	inserts [][]Message
}

type writeTx struct{}

func (d *writeDriver) InsertTx(_ context.Context, _ writeTx, msgs []Message) error {
	d.inserts = append(d.inserts, msgs)
	return nil
}

func (d *writeDriver) MarkConsumedTx(context.Context, writeTx, string, string) (bool, error) {
	return false, errors.New("not used")
}

func (d *writeDriver) RunInTx(context.Context, func(context.Context, writeTx) error) error {
	return errors.New("not used")
}

type ctxKey struct{}

// tagHook is a WriteHook that gives every message the header tag=<its name>
// and records the calls it got.
type tagHook struct {
	name  string
	calls [][]string // the msg_ids of each call
	ctxs  []any      // ctx's ctxKey value of each call
	err   error
}

func (h *tagHook) OnWrite(ctx context.Context, msgs []Message) error {
	var ids []string
	for i := range msgs {
		ids = append(ids, msgs[i].MsgID)
		if msgs[i].Headers == nil {
			msgs[i].Headers = map[string]string{}
		}
		msgs[i].Headers["tag"] += h.name
	}
	h.calls = append(h.calls, ids)
	h.ctxs = append(h.ctxs, ctx.Value(ctxKey{}))
	return h.err
}

func TestWriteHook(t *testing.T) {
	drv := &writeDriver{}
	a, b := &tagHook{name: "a"}, &tagHook{name: "b"}
	w, err := NewWriter[writeTx](drv, WriterConfig{Hooks: []Hook{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	shared := map[string]string{"tenant": "eu1"}
	msgs := []Message{
		{MsgID: "m1", Topic: "t", Payload: []byte(`{}`), Headers: shared},
		{MsgID: "m2", Topic: "t", Payload: []byte(`{}`), Headers: shared},
		{MsgID: "m3", Topic: "t", Payload: []byte(`{}`)},
	}
	ctx := context.WithValue(context.Background(), ctxKey{}, "caller")
	if err := w.Write(ctx, writeTx{}, msgs...); err != nil {
		t.Fatal(err)
	}
	// Once per call, with every message and the caller's context, in the
	// order of the list.
	for _, h := range []*tagHook{a, b} {
		if len(h.calls) != 1 || strings.Join(h.calls[0], ",") != "m1,m2,m3" || h.ctxs[0] != "caller" {
			t.Errorf("hook %s: calls %v with ctx values %v, want one call with m1,m2,m3 and the caller's ctx", h.name, h.calls, h.ctxs)
		}
	}
	if len(drv.inserts) != 1 || len(drv.inserts[0]) != 3 {
		t.Fatalf("inserts %v, want one of 3 messages", drv.inserts)
	}
	for _, m := range drv.inserts[0] {
		if m.Headers["tag"] != "ab" {
			t.Errorf("%s stored with headers %v, want tag=ab", m.MsgID, m.Headers)
		}
	}
	if drv.inserts[0][0].Headers["tenant"] != "eu1" {
		t.Errorf("a hook lost the caller's header: %v", drv.inserts[0][0].Headers)
	}
	if len(shared) != 1 || msgs[2].Headers != nil {
		t.Errorf("the hooks changed the caller's messages: %v, %v", shared, msgs[2].Headers)
	}

	// No messages: no hook.
	if err := w.Write(ctx, writeTx{}); err != nil || len(a.calls) != 1 {
		t.Errorf("an empty Write: %v, hook called %d times, want once (before)", err, len(a.calls))
	}
}

func TestWriteHookError(t *testing.T) {
	drv := &writeDriver{}
	boom := errors.New("no tenant")
	later := &tagHook{name: "later"}
	w, err := NewWriter[writeTx](drv, WriterConfig{Hooks: []Hook{&tagHook{name: "x", err: boom}, later}})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Write(context.Background(), writeTx{}, Message{MsgID: "m1", Topic: "t", Payload: []byte(`{}`)})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "write hook *outbox.tagHook") {
		t.Errorf("Write: %v, want the hook's error wrapped", err)
	}
	if len(drv.inserts) != 0 || len(later.calls) != 0 {
		t.Errorf("after the hook's error: %d inserts, later hook called %d times; want none", len(drv.inserts), len(later.calls))
	}
}

// badHeaderHook adds a header the validation refuses.
type badHeaderHook struct{}

func (badHeaderHook) OnWrite(_ context.Context, msgs []Message) error {
	for i := range msgs {
		msgs[i].Headers = map[string]string{"Not-Lower": "x"}
	}
	return nil
}

func TestWriteHookOutputValidated(t *testing.T) {
	drv := &writeDriver{}
	w, err := NewWriter[writeTx](drv, WriterConfig{Hooks: []Hook{badHeaderHook{}}})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Write(context.Background(), writeTx{}, Message{MsgID: "m1", Topic: "t", Payload: []byte(`{}`)})
	if !errors.Is(err, ErrInvalidMessage) || len(drv.inserts) != 0 {
		t.Errorf("a hook's invalid header: %v, %d inserts; want ErrInvalidMessage and none", err, len(drv.inserts))
	}
	if err := w.Validate(Message{MsgID: "m1", Topic: "t", Payload: []byte(`{}`)}); err != nil {
		t.Errorf("Validate runs the hooks: %v", err)
	}
}

// allHooks implements every hook interface.
type allHooks struct {
	writes, batches, cleanups int
}

func (h *allHooks) OnWrite(context.Context, []Message) error { h.writes++; return nil }
func (h *allHooks) OnBatch(context.Context, BatchReport)     { h.batches++ }
func (h *allHooks) OnCleanup(context.Context, CleanerReport, error) {
	h.cleanups++
}

type onlyCleanup struct{}

func (onlyCleanup) OnCleanup(context.Context, CleanerReport, error) {}

// One list serves the writer, the relay and the cleaner: each takes the
// hooks of its interface, and all refuse a value that is no hook.
func TestHooksOneList(t *testing.T) {
	all := &allHooks{}
	tag := &tagHook{name: "t"}
	hooks := []Hook{all, tag, onlyCleanup{}}
	drv := &writeDriver{}
	w, err := NewWriter[writeTx](drv, WriterConfig{Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.hooks) != 2 {
		t.Errorf("writer took %d hooks, want 2", len(w.hooks))
	}
	r, err := NewRelay(newFakeStore(0), Discard, RelayConfig{Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.hooks) != 1 {
		t.Errorf("relay took %d hooks, want 1", len(r.hooks))
	}
	c, err := NewCleaner(&deleteStore{}, CleanerConfig{OlderThan: time.Hour, Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.hooks) != 2 {
		t.Errorf("cleaner took %d hooks, want 2", len(c.hooks))
	}

	for _, c := range []struct {
		hooks []Hook
		want  string
	}{
		{[]Hook{all, 42}, "Hooks[1] (int) is not a hook"},
		{[]Hook{nil}, "Hooks[0] is nil"},
		{[]any{"x"}, "Hooks[0] (string) is not a hook"},
	} {
		if _, err := NewWriter[writeTx](drv, WriterConfig{Hooks: c.hooks}); err == nil || !strings.Contains(err.Error(), "NewWriter: "+c.want) {
			t.Errorf("NewWriter %v: %v, want %q", c.hooks, err, c.want)
		}
		if _, err := NewRelay(newFakeStore(0), Discard, RelayConfig{Hooks: c.hooks}); err == nil || !strings.Contains(err.Error(), "NewRelay: "+c.want) {
			t.Errorf("NewRelay %v: %v, want %q", c.hooks, err, c.want)
		}
		if _, err := NewCleaner(&deleteStore{}, CleanerConfig{OlderThan: time.Hour, Hooks: c.hooks}); err == nil || !strings.Contains(err.Error(), "NewCleaner: "+c.want) {
			t.Errorf("NewCleaner %v: %v, want %q", c.hooks, err, c.want)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	if got := (WriterConfig{}).WithDefaults(); got.MaxPayloadBytes != DefaultMaxBytes {
		t.Errorf("WriterConfig defaults: %+v", got)
	}
	if got := (WriterConfig{MaxPayloadBytes: 10}).WithDefaults(); got.MaxPayloadBytes != 10 {
		t.Errorf("WriterConfig kept %d, want 10", got.MaxPayloadBytes)
	}
	if _, err := NewWriter[writeTx](&writeDriver{}, WriterConfig{MaxPayloadBytes: -1}); err == nil {
		t.Error("a negative MaxPayloadBytes was taken")
	}
	got := (CleanerConfig{}).WithDefaults()
	if got.Interval != 10*time.Minute || got.BatchSize != 1000 || got.Logger == nil {
		t.Errorf("CleanerConfig defaults: %+v", got)
	}
}

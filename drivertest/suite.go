package drivertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

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

package drivertest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/outboxdriver"
)

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

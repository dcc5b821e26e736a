package outboxpgx_test

import (
	"testing"

	"github.com/outbox-go/outbox/internal/sqlstore"
)

// engine returns the SQL engine under d, for the plans the tests read.
func engine(t testing.TB, d any) *sqlstore.Store {
	t.Helper()
	s, ok := sqlstore.Of(d)
	if !ok {
		t.Fatalf("%T has no SQL engine", d)
	}
	return s
}

package drivertest

import (
	"testing"

	"github.com/outbox-go/outbox/internal/sqlstore"
)

// engine returns the SQL engine under d, whose statements' plans the plan
// tests read. For a driver that has none (one not of this repository) it
// skips the test.
func engine(t *testing.T, d any) *sqlstore.Store {
	t.Helper()
	s, ok := sqlstore.Of(d)
	if !ok {
		t.Skipf("driver %T has no SQL engine of this repository: the plan checks are for its drivers", d)
	}
	return s
}

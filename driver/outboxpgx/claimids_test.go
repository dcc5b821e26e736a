package outboxpgx_test

import (
	"testing"

	"github.com/outbox-go/outbox/drivertest"
)

func TestClaimIDs(t *testing.T) {
	t.Run("pgx", func(t *testing.T) { drivertest.ClaimIDs(t, setupPGX(t)) })
	t.Run("stdlib", func(t *testing.T) { drivertest.ClaimIDs(t, setupStdlib(t)) })
}

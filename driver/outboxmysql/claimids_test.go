package outboxmysql_test

import (
	"testing"

	"github.com/outbox-go/outbox/drivertest"
)

func TestClaimIDs(t *testing.T) { drivertest.ClaimIDs(t, setup(t)) }

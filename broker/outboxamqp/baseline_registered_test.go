package outboxamqp

import (
	"testing"

	"github.com/outbox-go/outbox/internal/benchbaseline"
)

// TestBaselineRegistered: the baseline is registered for outbox bench under
// every scheme the Publisher takes.
func TestBaselineRegistered(t *testing.T) {
	for _, scheme := range []string{"amqp", "amqps"} {
		if _, ok := benchbaseline.Lookup(scheme); !ok {
			t.Errorf("no baseline registered for %s:", scheme)
		}
	}
}

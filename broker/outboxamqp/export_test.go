package outboxamqp

import "github.com/outbox-go/outbox"

// ContentHeaderSize is contentHeaderSize of the publishing of m, for the
// frame limit test.
var ContentHeaderSize = func(m *outbox.Message, source string) int {
	pub := publishing(m, source)
	return contentHeaderSize(&pub)
}

// Baseline is the baseline that outbox bench looks up (benchbaseline), for
// the tests of the package outboxamqp_test.
var Baseline = baseline

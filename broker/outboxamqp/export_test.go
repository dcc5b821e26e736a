package outboxamqp

import "github.com/outbox-go/outbox"

// ContentHeaderSize is contentHeaderSize of the publishing of m, for the
// frame limit test.
var ContentHeaderSize = func(m *outbox.Message, source string) int {
	pub := publishing(m, source)
	return contentHeaderSize(&pub)
}

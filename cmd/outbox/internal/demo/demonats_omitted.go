//go:build nodevbrokers

package demo

import "github.com/outbox-go/outbox/cmd/outbox/internal/devbrokers"

// embeddedNATS stands for the embedded NATS server, which builds with the
// tag nodevbrokers leave out.
type embeddedNATS struct {
	url string
}

// startEmbeddedNATS fails: this build has no embedded NATS server.
func startEmbeddedNATS(string) (*embeddedNATS, error) {
	return nil, devbrokers.Omitted("demo --broker nats (the embedded NATS server)", "give a nats:// URL instead, e.g. --broker nats://127.0.0.1:4222")
}

func (e *embeddedNATS) stop() {}

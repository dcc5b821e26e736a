// Package clitest holds helpers that the tests of the outbox command's
// packages share. Only tests import it.
package clitest

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DeleteStreams deletes the named JetStream streams on the NATS server at
// url, ignoring any error: a test's cleanup calls it.
func DeleteStreams(url string, names ...string) {
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range names {
		_ = js.DeleteStream(ctx, name)
	}
}

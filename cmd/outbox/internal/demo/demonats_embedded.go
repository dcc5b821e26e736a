//go:build !nodevbrokers

package demo

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// embeddedNATS is a NATS server with JetStream running inside this process,
// on a random loopback port, storing its streams under a directory of the
// demo's own.
type embeddedNATS struct {
	srv *server.Server
	url string
}

func startEmbeddedNATS(storeDir string) (*embeddedNATS, error) {
	srv, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  storeDir,
		NoSigs:    true,
		NoLog:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("demo: embedded NATS: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("demo: the embedded NATS server did not start within 10s")
	}
	return &embeddedNATS{srv: srv, url: srv.ClientURL()}, nil
}

func (e *embeddedNATS) stop() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

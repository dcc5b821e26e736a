//go:build nodevbrokers

package bench

import "github.com/outbox-go/outbox/cmd/outbox/internal/devbrokers"

// startKfake fails: this build has no in-process fake Kafka.
func startKfake() ([]string, func(), error) {
	return nil, nil, devbrokers.Omitted("bench --broker kfake: (the in-process fake Kafka)", "give a kafka:// URL of a real cluster instead")
}

//go:build nodevbrokers

package main

// startKfake fails: this build has no in-process fake Kafka.
func startKfake() ([]string, func(), error) {
	return nil, nil, errOmitted("bench --broker kfake: (the in-process fake Kafka)", "give a kafka:// URL of a real cluster instead")
}

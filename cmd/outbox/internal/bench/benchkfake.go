//go:build !nodevbrokers

package bench

import "github.com/twmb/franz-go/pkg/kfake"

// startKfake starts franz-go's in-process fake Kafka with one broker that
// creates topics on first use, and returns its addresses and its Close.
func startKfake() (addrs []string, closeFn func(), err error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		return nil, nil, err
	}
	return c.ListenAddrs(), c.Close, nil
}

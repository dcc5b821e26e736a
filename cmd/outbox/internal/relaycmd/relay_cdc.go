package relaycmd

import (
	"github.com/outbox-go/outbox/cmd/outbox/internal/cli"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-go/outbox/outboxdriver"
)

// cdcOptions are the flags of the CDC relay.
type cdcOptions struct {
	on    bool
	sweep time.Duration
}

func addCDCFlags(f *cli.FlagSet, o *cdcOptions) {
	f.BoolVar(&o.on, "cdc",
		"take the messages from the database's change stream, in commit order, instead of polling for them "+
			"(PostgreSQL: wal_level = logical and a role with REPLICATION; docs/cdc.md): one relay of the table streams, "+
			"the others stand by and take over; where the server cannot stream the relay says so and polls")
	f.DurationVar(&o.sweep, "cdc-sweep-interval", time.Second,
		"with --cdc, the wait between two sweeps of the table for the messages the stream did not settle "+
			"(retries, messages of a relay that stopped)")
}

// streamCollector exports the change stream's lag of a store that streams
// (outboxdriver.StreamLagger), for outbox relay --cdc.
type streamCollector struct {
	sl                outboxdriver.StreamLagger
	up, bytes, behind *prometheus.Desc
}

func newStreamCollector(sl outboxdriver.StreamLagger) *streamCollector {
	return &streamCollector{
		sl: sl,
		up: prometheus.NewDesc("outbox_stream_up",
			"1 while this process streams the outbox table's changes (outbox relay --cdc), 0 while it stands by or polls.", nil, nil),
		bytes: prometheus.NewDesc("outbox_stream_lag_bytes",
			"Bytes of the server's change log (PostgreSQL WAL) past the position the stream last confirmed.", nil, nil),
		behind: prometheus.NewDesc("outbox_stream_lag_seconds",
			"Age, by its commit time, of the oldest transaction the stream received and has not yet confirmed; 0 when caught up.", nil, nil),
	}
}

func (c *streamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.bytes
	ch <- c.behind
}

func (c *streamCollector) Collect(ch chan<- prometheus.Metric) {
	lag, ok := c.sl.StreamLag()
	up := 0.0
	if ok {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(lag.Bytes))
	ch <- prometheus.MustNewConstMetric(c.behind, prometheus.GaugeValue, lag.Behind.Seconds())
}

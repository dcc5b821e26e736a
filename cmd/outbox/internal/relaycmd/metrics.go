package relaycmd

import (
	"log/slog"
	"net/http"

	"github.com/outbox-go/outbox/outboxdriver"
	"github.com/outbox-go/outbox/plugin/outboxprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serveMetrics serves Prometheus metrics at /metrics on s, for outbox relay
// --metrics-addr: the relays' counters and the table's backlog
// (outboxprom), and the Go runtime's and the process's. It returns the hook
// for the relays' RelayConfig.Hooks.
func serveMetrics(s *httpServer, store outboxdriver.Store, log *slog.Logger) (*outboxprom.Metrics, error) {
	var opts []outboxprom.Opt
	if br, ok := store.(outboxdriver.BacklogReader); ok {
		opts = append(opts, outboxprom.Backlog(br))
	}
	m, err := outboxprom.New(opts...)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	if sl, ok := store.(outboxdriver.StreamLagger); ok {
		if err := reg.Register(newStreamCollector(sl)); err != nil {
			return nil, err
		}
	}
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	s.start(mux, log, "serving metrics", "/metrics")
	return m, nil
}

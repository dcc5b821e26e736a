package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/outbox-go/outbox"
	"github.com/outbox-go/outbox/plugin/outboxprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsServer serves Prometheus metrics at /metrics for outbox relay
// --metrics-addr: the relays' counters and the table's backlog
// (outboxprom), and the Go runtime's and the process's.
type metricsServer struct {
	ln     net.Listener
	srv    *http.Server
	done   chan struct{} // closed when Serve has returned
	closed sync.Once
}

// checkMetricsAddr refuses an address that is not HOST:PORT or :PORT.
func checkMetricsAddr(addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--metrics-addr %q: %v; use HOST:PORT or :PORT, such as 127.0.0.1:9090 or :9090", addr, err)
	}
	return nil
}

// listenMetrics opens the listener before anything else starts, so that an
// address that is taken or not local fails the relay at once.
func listenMetrics(ctx context.Context, addr string) (*metricsServer, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			err = oe.Err // "bind: address already in use", without the address again
		}
		return nil, fmt.Errorf("--metrics-addr %s: cannot listen: %w", addr, err)
	}
	return &metricsServer{ln: ln}, nil
}

// serve builds the metrics of the relays on store and serves them; it
// returns the hook for the relays' RelayConfig.Hooks.
func (s *metricsServer) serve(store outbox.Store, log *slog.Logger) (*outboxprom.Metrics, error) {
	var opts []outboxprom.Opt
	if br, ok := store.(outbox.BacklogReader); ok {
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
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", "error", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+s.ln.Addr().String()+"/metrics")
	return m, nil
}

// close stops the server, letting a scrape in flight finish for a few
// seconds, or closes the listener when serve was never called. Only the
// first call does anything: the relay calls it once its relays have
// stopped, before it closes the database, and again on its way out.
func (s *metricsServer) close() {
	s.closed.Do(func() {
		if s.srv == nil {
			s.ln.Close()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			s.srv.Close()
		}
		<-s.done
	})
}

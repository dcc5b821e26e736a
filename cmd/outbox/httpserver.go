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
)

// httpServer is a server that outbox relay runs beside its relays: the
// metrics (--metrics-addr) and the admin handler (--admin-addr).
type httpServer struct {
	flag   string // the flag that set the address, for errors
	ln     net.Listener
	srv    *http.Server
	done   chan struct{} // closed when Serve has returned
	closed sync.Once
}

// checkAddr refuses an address that is not HOST:PORT or :PORT.
func checkAddr(flag, addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--%s %q: %v; use HOST:PORT or :PORT, such as 127.0.0.1:9090 or :9090", flag, addr, err)
	}
	return nil
}

// listenHTTP opens the listener before anything else starts, so that an
// address that is taken or not local fails the relay at once.
func listenHTTP(ctx context.Context, flag, addr string) (*httpServer, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			err = oe.Err // "bind: address already in use", without the address again
		}
		return nil, fmt.Errorf("--%s %s: cannot listen: %w", flag, addr, err)
	}
	return &httpServer{flag: flag, ln: ln}, nil
}

// start serves h and logs msg with the URL of path.
func (s *httpServer) start(h http.Handler, log *slog.Logger, msg, path string) {
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("server of --"+s.flag+" failed", "error", err)
		}
	}()
	log.Info(msg, "url", "http://"+s.ln.Addr().String()+path)
}

// close stops the server, letting a request in flight finish for a few
// seconds, or closes the listener when start was never called. Only the
// first call does anything: the relay calls it once its relays have
// stopped, before it closes the database, and again on its way out.
func (s *httpServer) close() {
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

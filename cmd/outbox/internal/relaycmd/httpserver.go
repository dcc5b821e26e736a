package relaycmd

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

// Limits of the servers of --metrics-addr and --admin-addr, so that clients
// that connect and stay idle, or send a request slowly, cannot hold the
// relay's file descriptors (which its database connections need too) or
// its goroutines without end.
const (
	// HTTPMaxConns is the most connections a server holds open at once;
	// further clients wait in the listen queue until one closes.
	HTTPMaxConns = 32
	// HTTPReadHeaderTimeout bounds reading a request's headers, from the
	// connection's first byte: a client that sends them slowly (slow loris)
	// or not at all is cut off.
	HTTPReadHeaderTimeout = 5 * time.Second
	// httpReadTimeout bounds reading a whole request, body included.
	httpReadTimeout = 15 * time.Second
	// httpWriteTimeout bounds a request from the end of its headers to the
	// end of the response: the admin API's database work (10s at most, after
	// waiting up to 10s for its turn) and a page of up to 10,000 messages.
	httpWriteTimeout = 60 * time.Second
	// httpIdleTimeout is how long a kept-alive connection may wait for its
	// next request.
	httpIdleTimeout = 30 * time.Second
	// httpMaxHeaderBytes bounds a request's headers.
	httpMaxHeaderBytes = 16 << 10
)

// httpServer is a server that outbox relay runs beside its relays: the
// metrics (--metrics-addr) and the admin handler (--admin-addr), each with
// the health endpoints /healthz and /readyz.
type httpServer struct {
	flag   string // the flag that set the address, for errors
	ln     net.Listener
	mux    *http.ServeMux
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
	return &httpServer{flag: flag, ln: newLimitListener(ln, HTTPMaxConns)}, nil
}

// serve starts serving the health endpoints of ready; start adds the
// server's own handler.
func (s *httpServer) serve(log *slog.Logger, ready *readiness) {
	s.mux = http.NewServeMux()
	ready.register(s.mux)
	s.srv = &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: HTTPReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("server of --"+s.flag+" failed", "error", err)
		}
	}()
	log.Info("serving health checks", "server", "--"+s.flag, "url", "http://"+s.ln.Addr().String()+ReadinessPath)
}

// start serves h beside the health endpoints, which serve must have
// started, and logs msg with the URL of path.
func (s *httpServer) start(h http.Handler, log *slog.Logger, msg, path string) {
	s.mux.Handle("/", h)
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
			s.srv.Close() //nolint:errcheck // after a failed Shutdown, Close only drops what is left
		}
		<-s.done
	})
}

// limitListener accepts at most n connections at a time: Accept waits for
// one of them to close before it takes the next from the listen queue.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slot back once, when it is closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

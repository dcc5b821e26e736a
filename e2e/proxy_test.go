package e2e

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// tcpProxy forwards the connections it accepts to target, until cut: then
// it closes every connection it forwards, on both sides, and closes each
// new one as soon as it accepts it. The chaos run's subscriber reaches the
// broker through one, so that a crash of the subscriber can cut its network
// at once, and keep the old subscriber from coming back, while the test's
// other clients go on talking to the broker directly.
type tcpProxy struct {
	target string
	l      net.Listener
	wg     sync.WaitGroup

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// startProxy listens on a port of its own and forwards to target until the
// test ends.
func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{target: target, l: l, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *tcpProxy) addr() string { return p.l.Addr().String() }

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return // closed
		}
		if p.isCut() {
			abort(c)
			continue
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

func (p *tcpProxy) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// forward pipes c to a new connection to the target, both ways, until
// either side ends or the proxy is cut.
func (p *tcpProxy) forward(c net.Conn) {
	defer p.wg.Done()
	u, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil { // the broker is down: so is the connection
		abort(c)
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		abort(c)
		abort(u)
		return
	}
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var once sync.Once
	end := func() {
		once.Do(func() {
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, u)
			p.mu.Unlock()
			abort(c)
			abort(u)
		})
	}
	var pipes sync.WaitGroup
	pipes.Go(func() { _, _ = io.Copy(u, c); end() })
	pipes.Go(func() { _, _ = io.Copy(c, u); end() })
	pipes.Wait()
}

// kill cuts every connection through the proxy now, on both sides, and
// closes every later one on arrival.
func (p *tcpProxy) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		abort(c)
	}
}

// heal lets the connections after a kill through again.
func (p *tcpProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// close kills the proxy and stops listening.
func (p *tcpProxy) close() {
	p.kill()
	_ = p.l.Close()
	p.wg.Wait()
}

// abort closes c with a reset rather than an orderly shutdown, as a cut
// network or a crashed peer would leave it.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// TestProxy checks the chaos run's proxy: it forwards both ways, and once
// killed it cuts the live connection and refuses new ones.
func TestProxy(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var served sync.WaitGroup
	served.Go(func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			served.Go(func() { _, _ = io.Copy(c, c); c.Close() })
		}
	})
	defer served.Wait()
	defer echo.Close()
	p := startProxy(t, echo.Addr().String())

	c, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 5)
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("through the proxy: %q, %v", buf, err)
	}

	p.kill()
	if _, err := c.Read(buf); err == nil {
		t.Fatal("the live connection survived the kill")
	}
	c2, err := net.Dial("tcp", p.addr())
	if err != nil {
		return // refused outright: as good
	}
	defer c2.Close()
	_ = c2.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = c2.Write([]byte("hello"))
	if n, err := c2.Read(buf); err == nil {
		t.Fatalf("a connection after the kill got %q through", buf[:n])
	}
}

package outboxmqtt

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"syscall"

	"github.com/eclipse/paho.golang/autopaho"
)

// dialBroker opens the network connection of one MQTT connection attempt.
//
// Two things differ from autopaho's own dialling. Reads go through a
// buffer: paho reads each packet in several small reads (type byte, length
// bytes, body), one system call each. And, on Linux, every read re-arms
// TCP_QUICKACK, so that the kernel acknowledges the broker's segments at
// once instead of delaying the ACK for up to 40ms: mosquitto without
// set_tcp_nodelay (its default) holds each PUBACK back with Nagle's algorithm
// until its previous segment is acknowledged, which stalled the end of every
// windowed batch.
func dialBroker(ctx context.Context, cfg autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
	// autopaho hands its own lifetime context here, without ConnectTimeout.
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	raw := c
	if tc, ok := c.(*net.TCPConn); ok {
		if sc, err := tc.SyscallConn(); err == nil {
			raw = &quickAckConn{Conn: tc, sc: sc}
		}
	}
	if u.Scheme == "mqtts" {
		tlsCfg := cfg.TlsCfg
		if tlsCfg == nil {
			tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if tlsCfg.ServerName == "" && !tlsCfg.InsecureSkipVerify {
			tlsCfg = tlsCfg.Clone()
			tlsCfg.ServerName = u.Hostname()
		}
		tc := tls.Client(raw, tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", u.Host, err)
		}
		return &bufferedConn{Conn: tc, r: bufio.NewReaderSize(tc, 16<<10)}, nil
	}
	return &bufferedConn{Conn: raw, r: bufio.NewReaderSize(raw, 16<<10)}, nil
}

// useOwnDialer reports whether dialBroker may replace autopaho's dialling,
// which also honours the all_proxy environment variable.
func useOwnDialer() bool { return os.Getenv("all_proxy") == "" }

// bufferedConn reads through a buffer (only paho's receiving goroutine
// reads) and writes each packet with one system call.
//
// paho writes a packet as several buffers; to a bare *net.TCPConn they go
// out in one writev, to any other connection in one Write each. paho holds
// the lock of a connection that is a sync.Locker around the writes of one
// packet (packets.ControlPacket.WriteTo, the only way paho writes), so that
// packets from several goroutines do not interleave. bufferedConn gathers
// the writes made under its lock and sends them when it is unlocked.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader

	mu        sync.Mutex
	gathering bool   // under mu: Write appends to pending
	pending   []byte // under mu
	err       error  // under mu: the error of a send made by Unlock
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// Lock starts gathering the writes of one packet.
func (c *bufferedConn) Lock() {
	c.mu.Lock()
	c.gathering = true
}

// Unlock sends the gathered packet. A failure is returned by the next
// Write, and closes the connection, so that paho's reader notices at once.
func (c *bufferedConn) Unlock() {
	if len(c.pending) > 0 && c.err == nil {
		if _, err := c.Conn.Write(c.pending); err != nil {
			c.err = err
			_ = c.Close()
		}
	}
	c.pending = c.pending[:0]
	c.gathering = false
	c.mu.Unlock()
}

func (c *bufferedConn) Write(b []byte) (int, error) {
	if !c.gathering {
		// paho v0.23 always writes under the lock; a write made outside
		// it is sent at once, and must not race with locked ones.
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.err != nil {
			return 0, c.err
		}
		return c.Conn.Write(b)
	}
	if c.err != nil {
		return 0, c.err
	}
	c.pending = append(c.pending, b...)
	return len(b), nil
}

// quickAckConn re-arms TCP_QUICKACK after each read (Linux clears it again
// by itself); elsewhere it only reads.
type quickAckConn struct {
	net.Conn
	sc syscall.RawConn
}

func (c *quickAckConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		setQuickAck(c.sc)
	}
	return n, err
}

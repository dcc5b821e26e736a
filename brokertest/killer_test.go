package brokertest

import (
	"errors"
	"net"
	"testing"
)

func TestKiller(t *testing.T) {
	var k Killer
	var peers []net.Conn
	dial := func() (net.Conn, error) {
		a, b := net.Pipe()
		peers = append(peers, b)
		return a, nil
	}
	c1, err := k.Dial(dial)
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := k.Dial(dial)
	if k.Killed() {
		t.Fatal("Killed before Kill")
	}
	k.Kill()
	for i, c := range []net.Conn{c1, c2} {
		if _, err := c.Write([]byte("x")); err == nil {
			t.Errorf("connection %d still writable after Kill", i)
		}
	}
	if _, err := k.Dial(dial); !errors.Is(err, ErrKilled) {
		t.Fatalf("Dial after Kill: %v, want ErrKilled", err)
	}
	if len(peers) != 2 {
		t.Fatalf("Dial after Kill dialled anyway (%d dials)", len(peers))
	}
}

package outboxmqtt

import "syscall"

// tcpQuickAck is TCP_QUICKACK from linux/tcp.h.
const tcpQuickAck = 12

func setQuickAck(sc syscall.RawConn) {
	_ = sc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpQuickAck, 1)
	})
}

//go:build !linux

package outboxmqtt

import "syscall"

func setQuickAck(syscall.RawConn) {}

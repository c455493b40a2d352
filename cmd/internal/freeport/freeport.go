// Package freeport hands tests free loopback addresses for the servers they
// start.
package freeport

import (
	"net"
	"sync"
	"testing"
)

// handedOut holds every address Addr returned. A port is free once its
// probe listener closes, so the kernel may offer it again to the next
// probe; without this, a test asking for two listeners could get one port
// for both.
var handedOut sync.Map

// Addr returns a 127.0.0.1:port address that was free a moment ago and that
// no earlier call in this process returned.
func Addr(t testing.TB) string {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if _, dup := handedOut.LoadOrStore(addr, true); !dup {
			return addr
		}
	}
}

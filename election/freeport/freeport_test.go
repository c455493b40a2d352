package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestAddrBelowEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	seen := map[string]bool{}
	for range 50 {
		addr := Addr(t)
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if lo > minPort && (port < minPort || port >= lo) {
			t.Fatalf("%s: want a port in [%d, %d), below the ephemeral range", addr, minPort, lo)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s is not free: %v", addr, err)
		}
		l.Close()
	}
}

func TestPortMatchesPick(t *testing.T) {
	p, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	if lo := ephemeralLow(); lo > minPort && (p < minPort || p >= lo) {
		t.Fatalf("port %d: want one in [%d, %d)", p, minPort, lo)
	}
	if _, dup := handedOut.Load(net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); !dup {
		t.Fatalf("port %d was not recorded as handed out", p)
	}
}

func TestListenHoldsItsPort(t *testing.T) {
	l, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := net.Listen("tcp", l.Addr().String()); err == nil {
		t.Fatalf("%s: bound twice", l.Addr())
	}
	if addr := Addr(t); addr == l.Addr().String() {
		t.Fatalf("%s handed out again while held", addr)
	}
}

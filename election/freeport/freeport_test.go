package freeport

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
	if reserve(p) {
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

// TestAnotherProcessSkipsReservedPorts runs this test binary again, as
// another process, which must find a port this one handed out reserved.
func TestAnotherProcessSkipsReservedPorts(t *testing.T) {
	if p := os.Getenv("FREEPORT_CHILD_PORT"); p != "" {
		port, _ := strconv.Atoi(p)
		fmt.Printf("reserve(%d)=%v\n", port, reserve(port))
		return
	}
	port, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	if reserve(port) {
		t.Fatalf("port %d: reserved twice in one process", port)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAnotherProcessSkipsReservedPorts$")
	cmd.Env = append(os.Environ(), "FREEPORT_CHILD_PORT="+strconv.Itoa(port))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := fmt.Sprintf("reserve(%d)=false", port); !strings.Contains(string(out), want) {
		t.Fatalf("another process: got %q, want %q", out, want)
	}
}

// Package freeport picks free loopback ports for the throwaway servers that
// tests, `fencegate dev` and the test tools (fencebench, fencechaos) start.
//
// It lives at the bottom of the import graph (cmd → api → proxy → tokens →
// election) so that every tree that starts a server, deploy's and
// examples' tests included, draws its ports by one rule.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// TB is the part of testing.TB that Addr uses; the package does not import
// testing, as fencegate's own binary links it.
type TB interface {
	Helper()
	Fatal(args ...any)
}

// Addr returns a 127.0.0.1:port address that was free a moment ago and that
// no earlier call in this process returned, or fails t.
func Addr(t TB) string {
	t.Helper()
	addr, err := Pick()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// Pick returns a 127.0.0.1:port address that was free a moment ago and that
// no earlier call in this process returned, for a server another process
// is about to bind.
//
// The port is drawn below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), from which every outgoing connection
// takes its local port: a port picked there (as Listen on port 0 does)
// can be taken by a client connection of another test, or of the servers
// it starts, between the probe and the server's own bind ("address
// already in use"), or while a server restarted on it is down. Where the
// range cannot be read, the kernel picks.
func Pick() (string, error) {
	l, err := Listen()
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}

// Listen is Pick's probe listener, held open: for a server in this
// process that binds the port itself once it closes l.
func Listen() (net.Listener, error) {
	lo := ephemeralLow()
	for range 1000 {
		port := 0
		if lo > minPort {
			port = minPort + rand.IntN(lo-minPort)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			if port == 0 {
				return nil, fmt.Errorf("freeport: %w", err)
			}
			continue // in use
		}
		if !reserve(l.Addr().(*net.TCPAddr).Port) {
			l.Close() // handed out already, by this process or another
			continue
		}
		return l, nil
	}
	return nil, errors.New("freeport: no free port found in 1000 tries")
}

// reservations hold, for the life of the process, an abstract Unix socket
// named after each port handed out (Linux). A port is free again once its
// probe listener closes, so the kernel may offer it to the next probe, of
// this process or another (go test runs packages in parallel): a port
// whose name is bound is skipped, so no two callers get one port between
// a probe and a server's bind. The kernel drops the names when the process
// exits; they leave no files. Elsewhere, handedOut does the same within
// the process.
var (
	reservationsMu sync.Mutex
	reservations   []net.Listener
	handedOut      = map[int]bool{}
)

// reserve reserves port, reporting false if it was handed out before.
func reserve(port int) bool {
	reservationsMu.Lock()
	defer reservationsMu.Unlock()
	if runtime.GOOS != "linux" {
		if handedOut[port] {
			return false
		}
		handedOut[port] = true
		return true
	}
	l, err := net.Listen("unix", "@fencegate-freeport-"+strconv.Itoa(port))
	if err != nil {
		return !errors.Is(err, syscall.EADDRINUSE)
	}
	reservations = append(reservations, l)
	return true
}

// Port is Pick's port alone.
func Port() (int, error) {
	l, err := Listen()
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// minPort is the lowest port Listen hands out: above the well-known and
// most registered services' ports.
const minPort = 20000

// ephemeralLow is the first port of the kernel's ephemeral range, or 0
// when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}

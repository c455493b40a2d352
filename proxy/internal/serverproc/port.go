package serverproc

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// freePort returns a port that was free a moment ago, drawn below the
// kernel's ephemeral range (net.ipv4.ip_local_port_range) where it can.
// Restart binds the same port again, and while the server is down a port
// of that range can become the local port of any outgoing connection (a
// chaos campaign's gateways open hundreds a second), after which the
// server cannot come back. Listen on port 0 draws from that range.
//
// cmd/internal/freeport and election/zookeeper/throwaway hold the same
// rule; an internal package cannot be shared across the top-level trees.
func freePort() (int, error) {
	lo := ephemeralLow()
	for range 1000 {
		port := 0
		if lo > minPort {
			port = minPort + rand.IntN(lo-minPort)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			if port == 0 {
				return 0, err
			}
			continue // in use
		}
		l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	return 0, errors.New("no free port found in 1000 tries")
}

// minPort is the lowest port freePort draws: above the well-known and
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

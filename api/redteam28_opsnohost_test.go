package api

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestRedTeam28OpsListenerRefusesProbesWithoutHost
//
// Attack (on availability, by the defence itself): --metrics-addr on
// loopback, probed by what runs beside fencegate: a local HAProxy's
// `option httpchk GET /healthz` (HTTP/1.0, no Host header: HAProxy's
// default), keepalived's HTTP_GET, a monitoring agent's or a shell's
// `printf 'GET /readyz HTTP/1.0\r\n\r\n' | nc 127.0.0.1 9090`.
//
// What happened (on this code): round 25 put the Host check of the main
// port (loopbackHosts) on OpsHandler; LocalHost("") is false, so a request
// without Host is refused 421 Misdirected Request: /healthz and /readyz
// fail for these probes, and the replica is taken out of the load
// balancer, though it serves. No web page can send such a request: a
// browser always sends the Host of the page's URL, so refusing it stops no
// DNS rebinding.
//
// What should happen: a request with no Host at all (HTTP/1.0) is not a
// browser's and is answered; only a Host naming some other site is
// refused.
//
// Severity: low (a replica reported down by local HTTP/1.0 health checks
// after upgrading; configuration dependent).
func TestRedTeam28OpsListenerRefusesProbesWithoutHost(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: OpsHandler(HTTPConfig{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(lis) }()
	t.Cleanup(func() { _ = hs.Close() })

	conn, err := net.DialTimeout("tcp", lis.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	// HAProxy's option httpchk, as sent.
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HOLE: an HTTP/1.0 health check without Host (HAProxy's httpchk) on the loopback --metrics-addr got %s: the replica is reported down; no browser sends a request without Host", resp.Status)
	}
}

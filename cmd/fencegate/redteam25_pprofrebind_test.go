package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/election/freeport"
)

// TestRedTeam25PprofAnswersRebindingHosts
//
// Attack: an operator debugging a replica runs serve with
// --pprof-addr=127.0.0.1:6060 (serve refuses anything but loopback without
// --insecure) and, as most do, the DSN on the command line:
// --postgres-dsn=postgres://gw:<password>@db/... Someone on that host
// opens a web page (a browser on a jump host or a workstation running
// fencegate). The page's name resolves to 127.0.0.1 after it loads (DNS
// rebinding), so its own requests to http://attacker.example:6060/ reach
// the pprof listener same-origin, and it reads the answers.
//
// What happened (on this code): the pprof listener answers any Host:
// GET /debug/pprof/cmdline with Host: attacker.example returns 200 and
// fencegate's whole command line, the database password included (and
// goroutine stacks, heap and CPU profiles on the other paths). Round 22
// refused such Hosts on the gateway's HTTP port (loopbackHosts) and kept
// DSN passwords out of every error message; the debugging port answers the
// one and hands out the other.
//
// What should happen: the pprof listener refuses a Host that is not an IP
// address or localhost (as loopbackHosts does), and /debug/pprof/cmdline
// is not served (or redacts DSN passwords).
//
// Severity: low to medium (the PostgreSQL password to any web page a
// browser on that host opens while pprof is on).
func TestRedTeam25PprofAnswersRebindingHosts(t *testing.T) {
	e := newRT2Env(t)
	pp := freeport.Addr(t)
	// The throwaway server trusts local logins, so any password does; the
	// operator's would be the real one.
	const secret = "rt25-s3cret-password"
	dsn := strings.Replace(e.pg.DSNAs("gw"), "gw@", "gw:"+secret+"@", 1)
	e.startServe(t, "--pprof-addr="+pp, "--postgres-dsn="+dsn)
	req, err := http.NewRequest(http.MethodGet, "http://"+pp+"/debug/pprof/cmdline", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "attacker.example:" + strings.Split(pp, ":")[1]
	req.Header.Set("Origin", "http://"+req.Host)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK && strings.Contains(string(body), secret) {
		t.Errorf("HOLE: pprof answered Host %q (a rebound name) with the command line, the PostgreSQL password %q included: %q", req.Host, secret, body)
	}
}

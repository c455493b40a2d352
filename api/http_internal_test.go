package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestLocalHost: the Host headers a loopback listener with no
// authentication answers name this machine without DNS.
func TestLocalHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:7080":        true,
		"127.0.0.1":             true,
		"[::1]:7080":            true,
		"localhost:7080":        true,
		"LOCALHOST.:7080":       true,
		"fencegate.localhost":   true,
		"10.0.0.5:7080":         true, // an address: no name to rebind
		"rebind.example:7080":   false,
		"localhost.example":     false,
		"127.0.0.1.nip.io:7080": false,
		"":                      false,
	} {
		if got := LocalHost(host); got != want {
			t.Errorf("LocalHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestOpsHandlerRefusesRebinding: the ops listener (--metrics-addr) takes
// callers with no identity; on loopback it answers only a Host naming this
// machine without DNS, so a web page under a rebound name cannot read
// /metrics, which shows each election's term.
func TestOpsHandlerRefusesRebinding(t *testing.T) {
	srv := httptest.NewServer(OpsHandler(HTTPConfig{}))
	defer srv.Close()
	for host, want := range map[string]int{
		"":                    http.StatusOK, // the server's own address
		"localhost":           http.StatusOK,
		"rebind.example:9090": http.StatusMisdirectedRequest,
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /healthz with Host %q: got %d, want %d", host, resp.StatusCode, want)
		}
	}
}

package api

import "testing"

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
		if got := localHost(host); got != want {
			t.Errorf("localHost(%q) = %v, want %v", host, got, want)
		}
	}
}

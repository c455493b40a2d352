package resp

import "testing"

// TestCrossProtocol: the names that start an HTTP request end a session,
// in any case; no command of Redis's is among them.
func TestCrossProtocol(t *testing.T) {
	for name, want := range map[string]bool{
		"POST": true, "post": true, "Host:": true, "HOST:": true, "PRI": true,
		"GET": false, "HOST": false, "SET": false, "PUBLISH": false,
	} {
		if got := crossProtocol(name); got != want {
			t.Errorf("crossProtocol(%q) = %v, want %v", name, got, want)
		}
	}
}

package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestPprofHandler(t *testing.T) {
	h := pprofHandler()
	for _, tc := range []struct {
		host, path string
		want       int
	}{
		{"127.0.0.1:6060", "/debug/pprof/", http.StatusOK},
		{"[::1]:6060", "/debug/pprof/goroutine?debug=1", http.StatusOK},
		{"localhost:6060", "/debug/pprof/symbol", http.StatusOK},
		{"10.0.0.7:6060", "/debug/pprof/", http.StatusOK},
		{"attacker.example:6060", "/debug/pprof/", http.StatusMisdirectedRequest},
		{"attacker.example", "/debug/pprof/goroutine?debug=1", http.StatusMisdirectedRequest},
		{"127.0.0.1:6060", "/debug/pprof/cmdline", http.StatusNotFound},
	} {
		r := httptest.NewRequest(http.MethodGet, "http://"+tc.host+tc.path, nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("GET %s with Host %s: got %d, want %d", tc.path, tc.host, w.Code, tc.want)
		}
	}
}

package embedded

import (
	"net/http"
	"strings"
	"testing"
)

// TestRefusesBrowsers: a web page's request reaches a loopback etcd, so
// the JSON gateway is off, no other origin is allowed and a rebound Host
// is refused.
func TestRefusesBrowsers(t *testing.T) {
	srv, err := Start(t.Context(), Config{Dir: t.TempDir(), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, tc := range []struct {
		name, method, path, host string
		want                     int
	}{
		{"gateway", http.MethodPost, "/v3/kv/put", "", http.StatusNotFound},
		{"rebound host", http.MethodGet, "/health", "attacker.example", http.StatusMisdirectedRequest},
		{"loopback host", http.MethodGet, "/health", "localhost", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.ClientURL()+tc.path, strings.NewReader(`{"key":"aw==","value":"dg=="}`))
			if err != nil {
				t.Fatal(err)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			req.Header.Set("Origin", "https://attacker.example")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("got %d, want %d", resp.StatusCode, tc.want)
			}
			if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "" {
				t.Errorf("got Access-Control-Allow-Origin %q, want none", got)
			}
		})
	}
}

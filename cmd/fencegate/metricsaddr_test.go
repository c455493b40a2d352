package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/election/freeport"
)

func TestCheckMetricsAddr(t *testing.T) {
	for _, tc := range []struct {
		addr, policy string
		insecure     bool
		want         string // "" for no error, else a substring
	}{
		{addr: ""},
		{addr: "127.0.0.1:9090"},
		{addr: "localhost:9090"},
		{addr: "0.0.0.0:9090", want: "--metrics-addr 0.0.0.0:9090 is reachable from other hosts without --policy-file"},
		{addr: ":9090", want: "without --policy-file"},
		{addr: ":9090", policy: "/etc/fencegate/policy.yaml"},
		{addr: ":9090", insecure: true},
	} {
		err := checkMetricsAddr(tc.addr, tc.policy, tc.insecure)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q policy %q: got %v, want no error", tc.addr, tc.policy, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q policy %q: got %v, want an error containing %q", tc.addr, tc.policy, err, tc.want)
		}
	}
	// serve refuses it at start, in one line, before dialling anything.
	err := serveUntilUp(t, []string{"--postgres-dsn=postgres://x", "--metrics-addr=:0"}, nil)
	if want := "--metrics-addr :0 is reachable from other hosts without --policy-file"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("serve --metrics-addr=:0: got %v, want an error containing %q", err, want)
	}
}

// TestMetricsAddr serves with mTLS on the HTTP port, where a kubelet probe
// or a Prometheus without a client certificate gets no answer, and checks
// that --metrics-addr answers them in plain HTTP, and serves nothing else.
func TestMetricsAddr(t *testing.T) {
	e := newSecureEnv(t)
	policyFile := e.writeFile(t, "policy.yaml", securePolicy)
	metricsAddr := freeport.Addr(t)
	g := e.serveGateway(t, "--cert-file="+e.srv.CertFile, "--key-file="+e.srv.KeyFile,
		"--trusted-ca-file="+e.ca.File, "--policy-file="+policyFile, "--metrics-addr="+metricsAddr)

	// What a probe does on the main port: TLS without a client certificate.
	hc := httpsClient(e.ca.ClientTLS(nil))
	if resp, err := hc.Get("https://" + g.httpAddr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("GET /healthz on the mTLS port without a certificate: got %s, want the handshake refused", resp.Status)
	}

	plain := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := plain.Get("http://" + metricsAddr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	waitFor(t, "/readyz on --metrics-addr", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	for _, tc := range []struct {
		path string
		code int
		body string // a substring
	}{
		{"/healthz", http.StatusOK, "ok"},
		{"/readyz", http.StatusOK, "ok"},
		{"/metrics", http.StatusOK, "\nfencegate_ready 1\n"},
		{"/metrics", http.StatusOK, "fencegate_policy_valid 1"},
		// Nothing of the API, whose callers must prove who they are.
		{"/v1/fences", http.StatusNotFound, ""},
		{"/v1/fences/a", http.StatusNotFound, ""},
		{"/v1/openapi.json", http.StatusNotFound, ""},
		{"/debug/pprof/", http.StatusNotFound, ""},
	} {
		code, body := get(tc.path)
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("GET %s on --metrics-addr: got %d %.80q, want %d with %q", tc.path, code, body, tc.code, tc.body)
		}
	}
	if !strings.Contains(g.stderr.String(), "metrics="+metricsAddr) {
		t.Errorf("start-up log: got %s, want metrics=%s in its serving line", grepLines(g.stderr.String(), "fencegate serving"), metricsAddr)
	}
}

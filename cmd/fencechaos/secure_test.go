package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/auth"
	"github.com/fencegate/fencegate/proxy/policy"
)

// The campaign's policy lets each of its principals do what it needs and
// nothing more: the intruder's certificate is valid, so refusing it is the
// policy's doing.
func TestCampaignPolicy(t *testing.T) {
	for _, backend := range []string{"postgres", "redis"} {
		c := &campaign{cfg: campaignConfig{Backend: backend, Fence: "chaos"}}
		cr, err := c.newCredentials(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(cr.policy)
		if err != nil {
			t.Fatal(err)
		}
		p, err := policy.Parse(data)
		if err != nil {
			t.Fatalf("%s: %v\n%s", backend, err, data)
		}
		wantRole := ""
		if backend == "postgres" {
			wantRole = writerRole
		}
		tests := []struct {
			principal, fence string
			action           policy.Action
			want             bool
		}{
			{workerPrincipal, "chaos", policy.ActionSQLWrite, true},
			{workerPrincipal, "chaos", policy.ActionRedisWrite, true},
			{workerPrincipal, "chaos-other", policy.ActionSQLWrite, false},
			{campaignPrincipal, "chaos-other", policy.ActionRedisWrite, true},
			{campaignPrincipal, "chaos", policy.ActionSQLWrite, false},
			{intruderPrincipal, "chaos", policy.ActionSQLWrite, false},
			{intruderPrincipal, "chaos", policy.ActionRedisWrite, false},
			{intruderPrincipal, "chaos-intruder", policy.ActionRedisWrite, true},
			{"", "chaos", policy.ActionSQLWrite, false},
		}
		for _, tt := range tests {
			d := p.Decide(tt.principal, tt.fence, tt.action)
			if d.Allowed != tt.want {
				t.Errorf("%s: %s %s %s: got allowed %v, want %v", backend, tt.principal, tt.action, tt.fence, d.Allowed, tt.want)
			}
			if d.Allowed && tt.action == policy.ActionSQLWrite && d.Role != wantRole {
				t.Errorf("%s: %s %s: got role %q, want %q", backend, tt.principal, tt.fence, d.Role, wantRole)
			}
		}
	}
}

// Over a real mTLS listener configured as fencegate's (api/auth), each
// client certificate names its principal, and a client without one is
// refused at the handshake, which the HTTP sender reports as TLS_REFUSED.
func TestCampaignCertificates(t *testing.T) {
	c := &campaign{cfg: campaignConfig{Backend: "redis", Fence: "chaos"}}
	cr, err := c.newCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stls, err := auth.NewServerTLS(auth.TLSFiles{CertFile: cr.server.Cert, KeyFile: cr.server.Key, TrustedCAFile: cr.server.CA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			http.Error(w, "no verified certificate", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(auth.PrincipalOf(r.TLS.VerifiedChains[0][0])))
	}))
	srv.TLS = stls.Config()
	srv.StartTLS()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "https://")

	for _, tt := range []struct {
		files tlsFiles
		want  string
	}{
		{cr.worker, workerPrincipal},
		{cr.campaign, campaignPrincipal},
		{cr.intruder, intruderPrincipal},
	} {
		tc, err := tt.files.config()
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{TLSClientConfig: tc}
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + addr + "/")
		if err != nil {
			t.Fatalf("%s: %v", tt.want, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if got := string(b); got != tt.want {
			t.Errorf("got principal %q, want %q", got, tt.want)
		}
	}

	tc, err := tlsFiles{CA: cr.worker.CA}.config()
	if err != nil {
		t.Fatal(err)
	}
	send, closeSend := newHTTPSender(workerConfig{Fence: "chaos", Backend: "redis", HTTPGateways: []string{addr}}, tc)
	defer closeSend()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if out, reason := send(ctx, 7, request{cmds: [][]string{{"SET", "{chaos}:x", "1"}}}); out != Refused || reason != reasonTLSRefused {
		t.Errorf("without a certificate: got %v %q, want %v %q", out, reason, Refused, reasonTLSRefused)
	}
}

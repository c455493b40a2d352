package api_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
)

// browserRequest sends what a web page's fetch() makes a browser send:
// method, body and the headers in hdr, plus the ones the browser adds
// itself and a page cannot set (Origin, Sec-Fetch-*), and, with host, the
// Host header of the page's own origin. It returns the status and body.
func browserRequest(t *testing.T, c *http.Client, method, url, host, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	if host != "" {
		req.Host = host
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	return res.StatusCode, string(raw)
}

// crossSiteNoCORS are the headers of
// fetch(url, {method: "POST", mode: "no-cors", body: '{"highWater":"0"}'})
// run by a page of https://attacker.example: a CORS "simple request"
// (POST, Content-Type text/plain, no header of the page's own), which
// the browser sends without a preflight; the page cannot read the answer
// and does not need to.
var crossSiteNoCORS = []string{
	"Content-Type", "text/plain;charset=UTF-8",
	"Origin", "https://attacker.example",
	"Referer", "https://attacker.example/",
	"Sec-Fetch-Site", "cross-site",
	"Sec-Fetch-Mode", "no-cors",
	"Sec-Fetch-Dest", "empty",
}

// TestRedTeam22CrossSiteResetOnLoopback: attack — a developer runs
// fencegate as `fencegate dev` runs it (loopback, no policy: API.md says
// that is what keeps other hosts out) and opens a web page of
// attacker.example. The page runs fetch() with mode "no-cors" against
// http://127.0.0.1:7080/v1/fences/<fence>/reset, body {"highWater":"0"}:
// a CORS simple request (POST, Content-Type text/plain, no custom
// header), which browsers send cross-site without a preflight. A reset
// needs no Fencing-Token, the HTTP gateway decodes any Content-Type as
// JSON (runtime.MIMEWildcard), and nothing looks at Origin or
// Sec-Fetch-Site. What happened: 200, the fence's mark in both backends
// and its monotonic term are lowered to 0, and the zombie of an earlier
// term, refused STALE_TOKEN a moment before, writes again. What should
// happen: a state-changing request that a browser could have sent
// cross-site (Origin of another site, Sec-Fetch-Site cross-site, or a
// body not declared application/json) is refused before it reaches the
// gateway (415/403), as loopback is no boundary for a browser on the same
// machine. Severity: high — a remote web page defeats the fence (rule 2)
// on a developer's or a single-host deployment's fencegate without any
// credential, writes nothing itself and leaves the zombie to do it.
func TestRedTeam22CrossSiteResetOnLoopback(t *testing.T) {
	routes, err := election.ParseRoutes("mono-*=monotonic")
	if err != nil {
		t.Fatal(err)
	}
	r := startReplicaWith(t, replicaConfig{watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), routes: routes})
	c := db(t)
	table := ledgerTable(t, c)
	fence := "mono-" + fenceName(t)
	for _, tok := range []int64{7, 8} {
		if got := execHTTP(t, r, fence, tok, insert(table, "leader", tok)); got.code != http.StatusOK {
			t.Fatalf("control: term %d: HTTP %d %s", tok, got.code, got.reason)
		}
	}
	if got := execHTTP(t, r, fence, 7, insert(table, "zombie", 7)); got.reason != "STALE_TOKEN" {
		t.Fatalf("control: the zombie of term 7 before the attack: HTTP %d %s, want STALE_TOKEN", got.code, got.reason)
	}

	code, body := browserRequest(t, http.DefaultClient, http.MethodPost, r.url+"/v1/fences/"+fence+"/reset", "",
		`{"highWater":"0"}`, crossSiteNoCORS...)
	if code >= 200 && code < 300 {
		t.Errorf("HOLE: a cross-site no-cors fetch (text/plain, Origin https://attacker.example) reset fence %s: HTTP %d %s", fence, code, body)
	}
	var hw int64
	if err := c.QueryRow(t.Context(), "SELECT coalesce((SELECT token FROM fencegate.fences WHERE name = $1), 0)", fence).Scan(&hw); err != nil {
		t.Fatal(err)
	}
	if hw != 8 {
		t.Errorf("HOLE: the fence's PostgreSQL mark is %d after the cross-site request, want 8", hw)
	}
	if got := execHTTP(t, r, fence, 7, insert(table, "zombie", 7)); got.code == http.StatusOK {
		t.Errorf("HOLE: after the cross-site request the zombie of term 7 writes again (HTTP 200); the table holds %d rows", count(t, c, table))
	}
}

// TestRedTeam22DNSRebindingReachesLoopback: attack — DNS rebinding against
// the same loopback fencegate. A page of rebind.attacker.example, whose
// name the attacker then re-points at 127.0.0.1, is same-origin with the
// fencegate port: it may read answers and set any header, and the
// browser sends Host: rebind.attacker.example:<port>. The page reads the
// current term from GET /v1/fences/<fence> (or /v1/fences, or /metrics)
// and writes with it as Fencing-Token. What happened: both answered as
// for a local client (200, the row is written), though the Host names no
// address of this machine. What should happen: a listener that relies on
// being on loopback for its security (no policy, no client identity)
// answers only requests whose Host is a loopback address or localhost
// (or a name configured for it), 421/403 otherwise, as other loopback
// daemons do against DNS rebinding. Severity: high — any web page the
// developer opens reads every fence and term and writes as the leader.
func TestRedTeam22DNSRebindingReachesLoopback(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)

	port := r.url[strings.LastIndexByte(r.url, ':')+1:]
	host := "rebind.attacker.example:" + port
	sameOrigin := []string{
		"Origin", "http://" + host,
		"Referer", "http://" + host + "/",
		"Sec-Fetch-Site", "same-origin",
		"Sec-Fetch-Mode", "cors",
		"Sec-Fetch-Dest", "empty",
	}
	code, body := browserRequest(t, http.DefaultClient, http.MethodGet, r.url+"/v1/fences/"+fence, host, "", sameOrigin...)
	if code == http.StatusOK {
		t.Errorf("HOLE: GET /v1/fences/%s with Host %s (a rebound name): 200 %s", fence, host, body)
	}
	hdr := append([]string{"Content-Type", "application/json", "Fencing-Token", fmt.Sprint(l.token)}, sameOrigin...)
	code, body = browserRequest(t, http.DefaultClient, http.MethodPost, r.url+"/v1/fences/"+fence+"/sql", host,
		sqlBody(insert(table, "rebound-page", l.token)), hdr...)
	if code == http.StatusOK {
		t.Errorf("HOLE: POST /v1/fences/%s/sql with Host %s (a rebound name) was applied: 200 %s", fence, host, body)
	}
	if n := count(t, c, table); n != 0 {
		t.Errorf("HOLE: %d rows written by a page of another site through DNS rebinding", n)
	}
}

// TestRedTeam22CrossSiteResetWithOperatorCert: attack — the production
// set-up of docs/SECURITY.md: TLS, client certificates, a policy that
// grants fence.admin to the operators' certificates only ("cn:ops-*").
// An operator has that certificate in a browser (to look at fencectl's
// JSON, the OpenAPI document, Grafana behind the same CA) and opens a
// page of attacker.example, which runs fetch(url, {method: "POST", mode:
// "no-cors", credentials: "include", body: '{"highWater":"0"}'}) against
// https://fencegate:7080/v1/fences/<fence>/reset. It is a CORS simple
// request, sent without a preflight, and with credentials the browser
// completes the TLS handshake with the operator's certificate. What
// happened: the request is authorized as the operator (principal
// cn:ops-…, fence.admin) and the fence's mark is lowered from the
// leader's term to 0 (200), with Origin https://attacker.example and
// Sec-Fetch-Site cross-site in plain sight and a body declared text/plain.
// What should happen: the HTTP gateway refuses a request a browser made
// for another site (Origin not its own, Sec-Fetch-Site cross-site) or a
// body not declared application/json before any handler runs, so a
// client certificate, an ambient credential in a browser, cannot be used
// by another site's page. Severity: high — an unauthenticated attacker
// exercises fence.admin (documented as re-admitting zombies' tokens down
// to the mark) through an operator's browser.
func TestRedTeam22CrossSiteResetWithOperatorCert(t *testing.T) {
	e := startRT(t, `rules:
  - name: writer
    principals: ["token:cron"]
    fences: ["@-a"]
    actions: [sql.write]
  - name: ops
    principals: ["cn:ops-@"]
    fences: ["@-*"]
    actions: [fence.admin, fence.read]
`, "cron")
	fence := e.id + "-a"
	tok := e.lead(t, fence)
	if _, err := rtExec(t.Context(), e.grpcClient(t, e.clientTLS(nil)), fence, tok, "authorization", "Bearer "+rtSecret("cron")); err != nil {
		t.Fatalf("control: the leader's write: %v", err)
	}
	mark := func() string {
		var hw int64
		if err := e.admin.QueryRow(t.Context(), "SELECT coalesce((SELECT token FROM fencegate.fences WHERE name = $1), 0)", fence).Scan(&hw); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(hw)
	}
	if got := mark(); got != tok {
		t.Fatalf("control: mark %s after the leader's write, want %s", got, tok)
	}
	// Without the operator's certificate the same request is refused:
	// the certificate is what authorizes it (401; 403 once cross-site
	// requests are refused first).
	anon := e.httpClient(t, e.clientTLS(nil))
	if code, body := browserRequest(t, anon, http.MethodPost, "https://"+e.httpAddr+"/v1/fences/"+fence+"/reset", "",
		`{"highWater":"0"}`, crossSiteNoCORS...); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Fatalf("control: without a certificate: HTTP %d %s, want 401", code, body)
	}

	browser := e.httpClient(t, e.clientTLS(e.cert(t, "ops", rtLeaf{CN: "ops-" + e.id})))
	code, body := browserRequest(t, browser, http.MethodPost, "https://"+e.httpAddr+"/v1/fences/"+fence+"/reset", "",
		`{"highWater":"0"}`, crossSiteNoCORS...)
	if code >= 200 && code < 300 {
		t.Errorf("HOLE: a cross-site no-cors fetch from https://attacker.example, through a browser holding the operator's certificate, reset fence %s: HTTP %d %s", fence, code, body)
	}
	if got := mark(); got != tok {
		t.Errorf("HOLE: the fence's PostgreSQL mark is %s after the cross-site request, want the leader's term %s", got, tok)
	}
}

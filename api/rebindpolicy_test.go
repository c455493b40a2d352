package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/policy"
)

// TestRebindingWithAnonymousPolicy: a policy whose rule matches any
// principal ("*") grants the callers a loopback listener takes with no
// identity, as no policy does: a page reaching the listener under a name
// of its own (DNS rebinding) is refused 421 all the same, and a client
// naming the address, or localhost, is answered.
func TestRebindingWithAnonymousPolicy(t *testing.T) {
	p, err := policy.Parse([]byte(`rules:
  - name: all
    principals: ["*"]
    fences: ["*"]
    actions: [sql.write, redis.write, fence.read]
`))
	if err != nil {
		t.Fatal(err)
	}
	r := startReplicaWith(t, replicaConfig{watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), policy: p})
	fence := fenceName(t)
	port := r.url[strings.LastIndexByte(r.url, ':')+1:]
	for host, want := range map[string]int{
		"rebind.attacker.example:" + port: http.StatusMisdirectedRequest,
		"localhost:" + port:               http.StatusOK,
		"127.0.0.1:" + port:               http.StatusOK,
	} {
		if code, body := browserRequest(t, http.DefaultClient, http.MethodGet, r.url+"/v1/fences/"+fence, host, ""); code != want {
			t.Errorf("GET with Host %s: %d %s, want %d", host, code, body, want)
		}
	}
}

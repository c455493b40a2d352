package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
)

// TestRedTeam25MonotonicRefusedWritesGrowSeries
//
// Attack: fences routed to the monotonic term source (--term-sources
// 'scratch-*=monotonic', or '*=monotonic' without etcd). A caller allowed
// that prefix (anyone on loopback with no policy; a principal with
// fences: ["scratch-*"] otherwise) sends writes that are refused and write
// nothing: one Redis command outside the allowlist (FLUSHALL) each, to a
// new fence name every time (rt25mono-<n>-0, -1, ...).
//
// What happened (on this code): admit verifies each new token with the
// source, and Monotonic.Verify records the name's term before the write
// is even tried, for good: the refused write leaves a term in memory, so
// the name is "known" (Gateway.fenceLabel), gets its own
// fencegate_rejections_total{fence=...} series instead of "_other", and
// fencegate_election_term / _has_leader / _leader / _term_changes_total
// series of its own, and is listed by ListFences. Every name a client
// tries adds five series and a map entry that nothing removes (only a fence reset to 0):
// memory and metric cardinality grow without bound from client-chosen
// names, with nothing stored in any backend. The per-fence verify limiter
// does not help: each new name has a full bucket of its own.
//
// What should happen: a monotonic term is learnt from an accepted write
// (or the names it keeps are bounded), and a name no write was accepted
// for stays "_other" in the metrics, as round 2 made it for etcd fences.
//
// Severity: medium (unbounded memory and Prometheus series from refused
// requests of any caller allowed a monotonic prefix).
func TestRedTeam25MonotonicRefusedWritesGrowSeries(t *testing.T) {
	routes, err := election.ParseRoutes("rt25mono-*=monotonic")
	if err != nil {
		t.Fatal(err)
	}
	r := startReplicaWith(t, replicaConfig{watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), routes: routes})
	base := "rt25mono-" + fenceName(t)
	const names = 200
	for i := range names {
		fence := fmt.Sprintf("%s-%d", base, i)
		got := redisHTTP(t, r, fence, 5, `{"commands":[["FLUSHALL"]]}`)
		if got.code == http.StatusOK || got.reason != "COMMAND_NOT_ALLOWED" {
			t.Fatalf("control: FLUSHALL on %s: HTTP %d %s, want COMMAND_NOT_ALLOWED", fence, got.code, got.reason)
		}
	}
	code, body := scrape(t, r.url)
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	fam := map[string]int{}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "#") || !strings.Contains(line, base+"-") {
			continue
		}
		fam[line[:strings.IndexByte(line, '{')]]++
	}
	total := 0
	for _, n := range fam {
		total += n
	}
	if total > 20 {
		t.Errorf("%d refused writes (nothing stored anywhere) to %d client-chosen fence names left %d series naming them: %v", names, names, total, fam)
	}
}

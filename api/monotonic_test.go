package api_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
)

// TestMonotonicSource: a fence routed to the monotonic source takes any
// token at or above its high-water mark, with no etcd election at all; a
// lower one is refused, on the replica that admitted the higher one
// without a round trip, and on a replica that never saw it by the backend.
// What is documented as lost holds too: a forged high token fences out the
// real leader. A fence left to etcd is unaffected (UNKNOWN_TERM).
func TestMonotonicSource(t *testing.T) {
	routes, err := election.ParseRoutes("mono-*=monotonic")
	if err != nil {
		t.Fatal(err)
	}
	rc := replicaConfig{watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), routes: routes}
	a, b := startReplicaWith(t, rc), startReplicaWith(t, rc)
	c := db(t)
	table := ledgerTable(t, c)
	fence := "mono-" + fenceName(t)

	for _, step := range []struct {
		name   string
		r      *replica
		token  int64
		code   int
		reason string
	}{
		{"first term, no election anywhere", a, 5, 200, ""},
		{"the same term again", a, 5, 200, ""},
		{"a new term (Raft, Lease transitions)", a, 7, 200, ""},
		{"the zombie of term 5 on the replica that saw 7", a, 5, 409, "STALE_TOKEN"},
		{"the zombie on a replica that saw nothing: the backend refuses", b, 5, 409, "STALE_TOKEN"},
		{"term 7 on the other replica", b, 7, 200, ""},
		{"a forged high token is taken: only the policy stands against it", b, 1000, 200, ""},
		{"and fences out the real leader", a, 8, 409, "STALE_TOKEN"},
	} {
		got := execHTTP(t, step.r, fence, step.token, insert(table, step.name, step.token))
		if step.code == 200 {
			if got.code != 200 {
				t.Fatalf("%s: got HTTP %d %s (%v), want 200", step.name, got.code, got.reason, got.body)
			}
			continue
		}
		wantRefusal(t, got, step.code, step.reason)
	}
	if n := count(t, c, table); n != 5 {
		t.Fatalf("got %d rows, want the 5 accepted writes", n)
	}
	var hw int64
	if err := c.QueryRow(t.Context(), "SELECT token FROM fencegate.fences WHERE name = $1", fence).Scan(&hw); err != nil || hw != 1000 {
		t.Fatalf("got high-water mark %d (%v), want 1000", hw, err)
	}
	// Redis keeps its own marks, under the same rule.
	cmd := func(v string) string { return fmt.Sprintf(`{"commands":[["SET","{%s}:k",%q]]}`, fence, v) }
	if got := redisHTTP(t, a, fence, 9, cmd("nine")); got.code != http.StatusOK {
		t.Fatalf("redis, token 9: got HTTP %d %s, want 200", got.code, got.reason)
	}
	wantRefusal(t, redisHTTP(t, b, fence, 8, cmd("eight")), 409, "STALE_TOKEN")

	// The listing shows the monotonic fence's term: the highest token
	// verified on that replica.
	var st map[string]any
	for _, f := range doHTTP(t, http.MethodGet, a.url+"/v1/fences", "", "").body["fences"].([]any) {
		if f := f.(map[string]any); f["name"] == fence {
			st = f
		}
	}
	if st == nil || st["term"] != "9" {
		t.Fatalf("GET /v1/fences on replica a: got %v for %s, want term 9", st, fence)
	}

	// Not routed: an etcd fence with no election refuses any token.
	wantRefusal(t, execHTTP(t, a, "etcd-"+fenceName(t), 5, insert(table, "etcd", 5)), 400, "UNKNOWN_TERM")
}

package api_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/api"
	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
)

// TestMonotonicFenceKnownOnceAccepted: a monotonic fence's name is a label
// value of its own once a write to it was accepted, not when a token for
// it was only verified: a refusal before any accepted write counts under
// _other and makes no per-election series; after one, refusals count
// under the fence's name and its term is exported.
func TestMonotonicFenceKnownOnceAccepted(t *testing.T) {
	routes, err := election.ParseRoutes("lbl-*=monotonic")
	if err != nil {
		t.Fatal(err)
	}
	r := startReplicaWith(t, replicaConfig{watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), routes: routes})
	fence := "lbl-" + fenceName(t)
	refused := func() {
		t.Helper()
		if got := redisHTTP(t, r, fence, 7, `{"commands":[["FLUSHALL"]]}`); got.reason != "COMMAND_NOT_ALLOWED" {
			t.Fatalf("FLUSHALL: got HTTP %d %s, want COMMAND_NOT_ALLOWED", got.code, got.reason)
		}
	}
	rejected := map[string]string{"fence": fence, "reason": "command_not_allowed"}
	elected := map[string]string{"election": fence}

	refused()
	if got := metricValue(t, r, "fencegate_rejections_total", rejected); got != -1 {
		t.Errorf("before any accepted write: rejections_total{fence=%q} = %v, want no series", fence, got)
	}
	if got := metricValue(t, r, "fencegate_election_term", elected); got != -1 {
		t.Errorf("before any accepted write: election_term{election=%q} = %v, want no series", fence, got)
	}

	if got := redisHTTP(t, r, fence, 7, fmt.Sprintf(`{"commands":[["SET","{%s}:k","v"]]}`, fence)); got.code != http.StatusOK {
		t.Fatalf("SET with token 7: got HTTP %d %s, want 200", got.code, got.reason)
	}
	refused()
	if got := metricValue(t, r, "fencegate_rejections_total", rejected); got != 1 {
		t.Errorf("after an accepted write: rejections_total{fence=%q} = %v, want 1", fence, got)
	}
	if got := metricValue(t, r, "fencegate_election_term", elected); got != 7 {
		t.Errorf("after an accepted write: election_term{election=%q} = %v, want 7", fence, got)
	}
}

// TestElectionNameNotUTF8Listed: an election whose name is not UTF-8 is
// listed and exported with each run of invalid bytes replaced by U+FFFD, and the
// other fences are listed as before.
func TestElectionNameNotUTF8Listed(t *testing.T) {
	r := startReplica(t, true)
	cli := newEtcdClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	other := fenceName(t)
	campaign(t, cli, other, "worker")
	name := other + "-\xff\xfe"
	lease, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.Revoke(context.WithoutCancel(t.Context()), lease.ID) })
	if _, err := cli.Put(ctx, prefix+"/"+name+"/694d7c", "worker-\xff", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "watcher sees both elections", func() bool {
		return r.watcher.Term(name).HasLeader() && r.watcher.Term(other).HasLeader()
	})

	resp, err := r.grpc.ListFences(ctx, &fencegatev1.ListFencesRequest{})
	if err != nil {
		t.Fatalf("ListFences: %v", err)
	}
	want := map[string]string{other: "worker", other + "-\uFFFD": "worker-\uFFFD"}
	for _, f := range resp.GetFences() {
		if w, ok := want[f.GetName()]; ok {
			if f.GetLeader() != w {
				t.Errorf("ListFences: fence %q leader %q, want %q", f.GetName(), f.GetLeader(), w)
			}
			delete(want, f.GetName())
		}
		if !utf8.ValidString(f.GetName()) || !utf8.ValidString(f.GetLeader()) {
			t.Errorf("ListFences: fence %q leader %q is not UTF-8", f.GetName(), f.GetLeader())
		}
	}
	if len(want) != 0 {
		t.Errorf("ListFences: missing %v", want)
	}
	if got := metricValue(t, r, "fencegate_election_has_leader", map[string]string{"election": other + "-\uFFFD"}); got != 1 {
		t.Errorf("election_has_leader of the name not UTF-8, replaced: got %v, want 1", got)
	}
	if got := metricValue(t, r, "fencegate_election_has_leader", map[string]string{"election": other}); got != 1 {
		t.Errorf("election_has_leader{election=%q}: got %v, want 1", other, got)
	}
}

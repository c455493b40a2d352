package api_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	fencegatev1 "github.com/fencegate/fencegate/api/gen/fencegate/v1"
)

// TestRedTeam25ElectionNameNotUTF8BlindsMetrics
//
// Attack: any worker allowed to campaign under the election prefix (or
// anything with write access to it) creates a candidate key whose election
// segment is not valid UTF-8: "<prefix>/rt25-\xff/x". etcd keys are bytes;
// `etcdctl elect $'rt25-\xff' v` or any client library does it. No write
// through fencegate is needed.
//
// What happened (on this code): the watcher takes the key as election
// "rt25-\xff" and the gateway's state collector hands that name, as is,
// to prometheus.MustNewConstMetric for fencegate_election_term and its
// siblings. client_golang refuses a label value that is not UTF-8: the
// collector panics, the registry recovers it as a collection error, and
// promhttp (HTTPErrorOnError, serve's setting) answers every scrape of
// /metrics 500. One key blinds the monitoring of every replica watching the
// prefix (every fencegate_* series, the zombie-write and no-leader alerts,
// readiness history) until someone finds and deletes it (and every replica
// that saw it is restarted: a deleted election stays in the watcher's
// terms). Leader values were already made UTF-8 (leaderLabel); election
// names were not. The same name also breaks ListFences for every caller
// (see TestRedTeam25LeaderValueNotUTF8BreaksListFences).
//
// What should happen: election names that cannot be label values are left
// out of (or escaped in) the per-election series, as fence labels of
// invalid names go to "_other"; /metrics keeps answering 200 with the other
// series.
//
// Severity: medium (monitoring and alerting of the whole fleet turned off by
// one etcd key a campaigning worker may write).
func TestRedTeam25ElectionNameNotUTF8BlindsMetrics(t *testing.T) {
	r := startReplica(t, true)
	cli := newEtcdClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	// A healthy scrape first.
	if code, body := scrape(t, r.url); code != http.StatusOK {
		t.Fatalf("before the key: /metrics answered %d: %.300s", code, body)
	}

	lease, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	name := "rt25-" + fenceName(t) + "\xff"
	key := prefix + "/" + name + "/694d7c"
	if _, err := cli.Put(ctx, key, "worker", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cli.Revoke(context.WithoutCancel(t.Context()), lease.ID)
	})
	waitFor(t, "watcher sees the election", func() bool { return r.watcher.Term(name).HasLeader() })

	code, body := scrape(t, r.url)
	if code != http.StatusOK {
		t.Fatalf("one election key whose name is not UTF-8 made /metrics answer %d (every series lost): %.400s", code, body)
	}
	if !strings.Contains(body, "fencegate_requests_total") {
		t.Fatalf("/metrics lost the request series: %.400s", body)
	}
}

// TestRedTeam25LeaderValueNotUTF8BreaksListFences
//
// Attack: a worker campaigns for its own fence with a campaign value that
// is not UTF-8 (a binary node id, a protobuf-encoded address; etcd values
// are bytes and concurrency.Election takes any string). Callers of every
// other fence then list fences (GET /v1/fences, rpc ListFences; fencectl
// fences and status use them).
//
// What happened (on this code): fenceMessage copies Term.Leader into the
// protobuf string field Fence.leader as is; a proto3 string must be UTF-8,
// so the answer cannot be encoded: the gRPC call fails INTERNAL ("string
// field contains invalid UTF-8") and the HTTP one 500, for every caller and
// every fence, for as long as that worker leads. GetFence of the fence
// fails the same way. One campaigning worker turns off the fleet's fence
// listing. The metrics path already cleans leader values (leaderLabel); the
// API does not.
//
// What should happen: the leader value is sent as valid UTF-8 (invalid
// bytes replaced, as jsonValue does for Redis results), and the listing of
// the other fences is unaffected.
//
// Severity: low to medium (availability of the read API and of fencectl
// for everyone, from one worker's campaign value).
func TestRedTeam25LeaderValueNotUTF8BreaksListFences(t *testing.T) {
	r := startReplica(t, true)
	cli := newEtcdClient(t)
	fence := fenceName(t)
	campaign(t, cli, fence, "node-\xff\xfe")
	waitFor(t, "watcher sees the leader", func() bool { return r.watcher.Term(fence).HasLeader() })

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := r.grpc.ListFences(ctx, &fencegatev1.ListFencesRequest{}); err != nil {
		t.Errorf("gRPC ListFences failed for everyone because one leader's campaign value is not UTF-8: %v", err)
	}
	if _, err := r.grpc.GetFence(ctx, &fencegatev1.GetFenceRequest{Fence: fence}); err != nil {
		t.Errorf("gRPC GetFence failed: %v", err)
	}
	resp, err := http.Get(r.url + "/v1/fences")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/fences answered %d: %.300s", resp.StatusCode, raw)
	}
}

func scrape(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/redislease"
	"github.com/fencegate/fencegate/proxy"
	redisthrowaway "github.com/fencegate/fencegate/proxy/redis/throwaway"
)

// Red-team tests of the term sources through the gateway (HTTP).

// A Redis lease's counter is lost (FLUSHALL of the lease Redis, a restart
// without AOF, an operator deleting the keys) while its holder a is a
// zombie; b takes the lease and INCR hands it token 1. a's token 5 is no
// longer any lease's: every path must refuse it and store nothing. (b's
// token 1 cannot pass the high-water mark 5: liveness, not checked here.)
func TestRedTeamLeaseCounterReset(t *testing.T) {
	other, err := redisthrowaway.Start(t.Context(), redisthrowaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	pgc := db(t)
	table := ledgerTable(t, pgc)

	same, _, sameLease := leaseReplica(t, redisAddr, "")
	apart, _, apartLease := leaseReplica(t, other.Addr(), redisAddr)

	redisWrite := func(r *replica, fence string, token int64) httpReply {
		return redisHTTP(t, r, fence, token, fmt.Sprintf(`{"commands":[["RPUSH","{%s}:log","%d"]]}`, fence, token))
	}
	redisStored := func(fence string, token int64) int {
		n := 0
		for _, v := range rdb(t).LRange(t.Context(), "{"+fence+"}:log", 0, -1).Val() {
			if v == fmt.Sprint(token) {
				n++
			}
		}
		return n
	}
	pgWrite := func(r *replica, fence string, token int64) httpReply {
		return execHTTP(t, r, fence, token, insert(table, fence, token))
	}
	pgStored := func(fence string, token int64) int {
		var n int
		if err := pgc.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE worker = $1 AND token = $2", fence, token).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, p := range []struct {
		name   string
		r      *replica
		lease  *goredis.Client
		write  func(r *replica, fence string, token int64) httpReply
		stored func(fence string, token int64) int
	}{
		{"redis, lease in the same Redis: checked in the script", same, sameLease, redisWrite, redisStored},
		{"redis, lease in another Redis: read before use", apart, apartLease, redisWrite, redisStored},
		{"postgres: read before use", same, sameLease, pgWrite, pgStored},
	} {
		t.Run(p.name, func(t *testing.T) {
			fence := "lease-" + fenceName(t)
			k := redislease.Keys{Lease: "lease:" + fence, Counter: "lease:" + fence + ":token"}
			if err := p.lease.Set(t.Context(), k.Counter, 4, 0).Err(); err != nil {
				t.Fatal(err)
			}
			a := &leaseWorker{c: p.lease, k: k, id: "worker-a"}
			b := &leaseWorker{c: p.lease, k: k, id: "worker-b"}
			ta := a.acquire(t, time.Minute)
			if got := p.write(p.r, fence, ta); got.code != http.StatusOK {
				t.Fatalf("a's write with %d: got %d %s", ta, got.code, got.reason)
			}
			// The lease Redis loses both keys; b takes the lease: token 1.
			if err := p.lease.Del(t.Context(), k.Lease, k.Counter).Err(); err != nil {
				t.Fatal(err)
			}
			tb := b.acquire(t, time.Minute)
			if tb >= ta {
				t.Fatalf("b's token %d, want below a's %d", tb, ta)
			}
			before := p.stored(fence, ta)
			got := p.write(p.r, fence, ta)
			if after := p.stored(fence, ta); got.code == http.StatusOK || after != before {
				t.Errorf("zombie a (token %d) after the counter reset, b holds the lease with token %d: got HTTP %d %s, rows of a %d -> %d; want refused, nothing stored",
					ta, tb, got.code, got.reason, before, after)
			}
			bw := p.write(p.r, fence, tb)
			t.Logf("b's write with %d: HTTP %d %s", tb, bw.code, bw.reason)
		})
	}
}

// Edge and forged tokens on fences of each source kind reachable without
// an outside election: etcd (with a leader), monotonic, redis-lease (same
// Redis). None is accepted, nothing is stored, and the leader's next write
// is still accepted (no cache poisoned by a refused forgery, except
// monotonic, whose forged-but-accepted tokens fence the leader out by
// design; there only refused forgeries are sent).
func TestRedTeamEdgeTokensEverySource(t *testing.T) {
	routes, err := election.ParseRoutes("mono-*=monotonic,lease-*=redis-lease")
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr, Protocol: 2})
	t.Cleanup(func() { c.Close() })
	src, err := redislease.New(c, redislease.Config{PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rc := replicaConfig{
		watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), routes: routes,
		others: map[string]election.Source{election.SourceRedisLease: src},
	}
	r := startReplicaWith(t, rc)
	cli := newEtcdClient(t)

	base := fenceName(t)
	type fence struct {
		name  string
		token int64
	}
	etcdF := fence{name: "etcd-" + base}
	etcdF.token = campaign(t, cli, etcdF.name, "leader").token
	waitTerm(t, r, etcdF.name, etcdF.token)
	monoF := fence{name: "mono-" + base, token: 7}
	leaseF := fence{name: "lease-" + base}
	lw := &leaseWorker{c: c, k: redislease.Keys{Lease: "lease:" + leaseF.name, Counter: "lease:" + leaseF.name + ":token"}, id: "w"}
	leaseF.token = lw.acquire(t, time.Minute)

	raw := func(f fence, tok string, backend string) httpReply {
		body := fmt.Sprintf(`{"commands":[["RPUSH","{%s}:log","x"]]}`, f.name)
		path := "/redis"
		if backend == "pg" {
			body = sqlBody(`{"sql":"SELECT 1"}`)
			path = "/sql"
		}
		return doHTTP(t, http.MethodPost, r.url+"/v1/fences/"+f.name+path, tok, body)
	}
	for _, f := range []fence{etcdF, monoF, leaseF} {
		for _, backend := range []string{"redis", "pg"} {
			if f.name == leaseF.name && backend == "pg" {
				continue // no read-before-use wired in this replica
			}
			if got := raw(f, fmt.Sprint(f.token), backend); got.code != http.StatusOK {
				t.Fatalf("%s %s: leader's write with %d: %d %s", f.name, backend, f.token, got.code, got.reason)
			}
			forged := []string{
				"0", "-1", "+1", "01", "1e3", "0x10", "９", "9223372036854775808", "18446744073709551615",
				"18446744073709551616", "99999999999999999999999",
			}
			if f.name != monoF.name {
				forged = append(forged, fmt.Sprint(f.token+1), "9223372036854775807")
			}
			for _, tok := range forged {
				if got := raw(f, tok, backend); got.code == http.StatusOK {
					t.Errorf("%s %s: token %q accepted", f.name, backend, tok)
				}
			}
			if got := raw(f, fmt.Sprint(f.token), backend); got.code != http.StatusOK {
				t.Errorf("%s %s: leader's write with %d after the forgeries: %d %s", f.name, backend, f.token, got.code, got.reason)
			}
		}
	}
}

// A forged token on a monotonic fence in a request the gateway then
// refuses (here: a Redis command outside the allowlist) writes nothing,
// yet the monotonic source has already taken it as the fence's term. The
// safe outcome checked: nothing of the forgery lands in either backend.
// What happens to the real leader is logged (a finding, not a safety
// violation).
func TestRedTeamMonotonicRefusedForgeryWritesNothing(t *testing.T) {
	routes, err := election.ParseRoutes("mono-*=monotonic")
	if err != nil {
		t.Fatal(err)
	}
	r := startReplicaWith(t, replicaConfig{watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), routes: routes})
	fence := "mono-" + fenceName(t)
	pgc := db(t)
	table := ledgerTable(t, pgc)
	if got := execHTTP(t, r, fence, 5, insert(table, fence, 5)); got.code != http.StatusOK {
		t.Fatalf("leader 5: %d %s", got.code, got.reason)
	}
	forged := int64(1) << 40
	got := redisHTTP(t, r, fence, forged, fmt.Sprintf(`{"commands":[["FLUSHALL"],["SET","{%s}:x","1"]]}`, fence))
	if got.code == http.StatusOK {
		t.Fatalf("forged write with a refused command accepted")
	}
	if n := rdb(t).Exists(t.Context(), "{"+fence+"}:x", "fencegate:{"+fence+"}:token").Val(); n != 0 {
		t.Errorf("refused forged write left %d keys", n)
	}
	var hw int64
	_ = pgc.QueryRow(t.Context(), "SELECT token FROM fencegate.fences WHERE name = $1", fence).Scan(&hw)
	if hw != 5 {
		t.Errorf("postgres high-water after a refused forgery: %d, want 5", hw)
	}
	after := execHTTP(t, r, fence, 5, insert(table, fence, 5))
	// Known and documented (docs/SECURITY.md): the verified token is the
	// term, which is what lets the listener end an open transaction of a
	// lower token that holds the fence's row; the real leader is
	// STALE_TOKEN here until a fence reset.
	t.Logf("refused forgery (%s) then leader 5 through PostgreSQL (high-water still 5): HTTP %d %s %v", got.reason, after.code, after.reason, after.body["message"])
}

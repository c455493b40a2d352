package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/redislease"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/redis"
	redisthrowaway "github.com/fencegate/fencegate/proxy/redis/throwaway"
)

// leaseWorker is the seed's lease worker: SET <lease key> <id> NX PX
// <ttl>, then INCR <counter key> for its token; it releases with
// compare-and-DEL.
type leaseWorker struct {
	c   *goredis.Client
	k   redislease.Keys
	id  string
	tok int64
}

var releaseScript = goredis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func (w *leaseWorker) acquire(t *testing.T, ttl time.Duration) int64 {
	t.Helper()
	ctx := t.Context()
	ok, err := w.c.SetNX(ctx, w.k.Lease, w.id, ttl).Result()
	if err != nil || !ok {
		t.Fatalf("%s: SET %s NX: got %v, %v, want the lease", w.id, w.k.Lease, ok, err)
	}
	if w.tok, err = w.c.Incr(ctx, w.k.Counter).Result(); err != nil {
		t.Fatalf("%s: INCR: %v", w.id, err)
	}
	return w.tok
}

func (w *leaseWorker) release(t *testing.T) {
	t.Helper()
	if n, err := releaseScript.Run(t.Context(), w.c, []string{w.k.Lease}, w.id).Int(); err != nil || n != 1 {
		t.Fatalf("%s: release: got %d, %v", w.id, n, err)
	}
}

// leaseReplica is a replica routing lease-* to a redis-lease source on
// the Redis at leaseAddr, wired as serve wires it: the Redis backend
// checks the lease in its script when the lease is in its own Redis, and
// every other write to a lease fence reads the lease before use.
func leaseReplica(t *testing.T, leaseAddr, dataRedis string) (*replica, *redislease.Source, *goredis.Client) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: leaseAddr, Protocol: 2})
	t.Cleanup(func() { c.Close() })
	// No poll loop: memory learns only from Verify, so each refusal below
	// comes from the check under test, not from a timely poll.
	src, err := redislease.New(c, redislease.Config{PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	routes, err := election.ParseRoutes("lease-*=redis-lease")
	if err != nil {
		t.Fatal(err)
	}
	isLease := func(fence string) bool { return strings.HasPrefix(fence, "lease-") }
	sameRedis := dataRedis == "" || dataRedis == leaseAddr
	rc := replicaConfig{
		watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), routes: routes,
		others:    map[string]election.Source{election.SourceRedisLease: src},
		redisAddr: dataRedis,
		readBeforeUse: func(backend, fence string) bool {
			return isLease(fence) && (backend == proxy.BackendPostgres || !sameRedis)
		},
	}
	rc.redisLeases = func(fence string) (redis.LeaseKeys, bool) {
		if !isLease(fence) {
			return redis.LeaseKeys{}, false
		}
		k := src.Keys(fence)
		return redis.LeaseKeys{Lease: k.Lease, Counter: k.Counter, Elsewhere: !sameRedis}, true
	}
	return startReplicaWith(t, rc), src, c
}

// TestRedisLeaseSource drives a fence routed to redis-lease with the seed's
// lease worker, through HTTP, for each way the lease is checked: in the
// Redis fencing script (lease and data in one Redis), and read before use
// (PostgreSQL; Redis data apart from the lease's Redis). Each refusal
// stores nothing.
func TestRedisLeaseSource(t *testing.T) {
	other, err := redisthrowaway.Start(t.Context(), redisthrowaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	pgc := db(t)
	table := ledgerTable(t, pgc)

	same, sameSrc, sameLease := leaseReplica(t, redisAddr, "")
	apart, apartSrc, apartLease := leaseReplica(t, other.Addr(), redisAddr)

	type path struct {
		name  string
		r     *replica
		lease *goredis.Client
		src   *redislease.Source
		write func(r *replica, fence string, token int64) httpReply
		// stored counts the fence's stored writes.
		stored func(fence string) int
	}
	redisWrite := func(r *replica, fence string, token int64) httpReply {
		return redisHTTP(t, r, fence, token, fmt.Sprintf(`{"commands":[["RPUSH","{%s}:log","%d"]]}`, fence, token))
	}
	redisStored := func(fence string) int { return int(rdb(t).LLen(t.Context(), "{"+fence+"}:log").Val()) }
	for _, p := range []path{
		{"redis, lease in the same Redis: checked in the script", same, sameLease, sameSrc, redisWrite, redisStored},
		{"redis, lease in another Redis: read before use", apart, apartLease, apartSrc, redisWrite, redisStored},
		{
			"postgres: read before use", same, sameLease, sameSrc,
			func(r *replica, fence string, token int64) httpReply {
				return execHTTP(t, r, fence, token, insert(table, fence, token))
			},
			func(fence string) int {
				var n int
				if err := pgc.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE worker = $1", fence).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			},
		},
	} {
		t.Run(p.name, func(t *testing.T) {
			fence := "lease-" + fenceName(t)
			k := redislease.Keys{Lease: "lease:" + fence, Counter: "lease:" + fence + ":token"}
			a := &leaseWorker{c: p.lease, k: k, id: "worker-a"}
			b := &leaseWorker{c: p.lease, k: k, id: "worker-b"}
			stored := 0
			step := func(what string, token int64, code int, reason string) {
				t.Helper()
				got := p.write(p.r, fence, token)
				if code == http.StatusOK {
					if got.code != http.StatusOK {
						t.Fatalf("%s: token %d: got HTTP %d %s (%v), want 200", what, token, got.code, got.reason, got.body)
					}
					stored++
				} else {
					if got.code != code || got.reason != reason {
						t.Fatalf("%s: token %d: got HTTP %d %s (%v), want %d %s", what, token, got.code, got.reason, got.body, code, reason)
					}
				}
				if n := p.stored(fence); n != stored {
					t.Fatalf("%s: got %d writes stored, want %d", what, n, stored)
				}
			}

			step("forged: no lease was ever taken", 1, 400, "UNKNOWN_TERM")
			ta := a.acquire(t, time.Minute)
			step("a holds the lease", ta, 200, "")
			step("forged: above every token handed out", ta+1, 400, "UNKNOWN_TERM")
			a.release(t)
			step("a released: its term ended, no one holds the lease", ta, 409, "TERM_ENDED")
			tb := b.acquire(t, 500*time.Millisecond)
			step("a is a zombie: b holds the lease", ta, 409, "STALE_TOKEN")
			step("b holds the lease", tb, 200, "")
			waitFor(t, "b's lease to expire", func() bool { return p.lease.Exists(t.Context(), k.Lease).Val() == 0 })
			step("b's lease expired, no new holder", tb, 409, "TERM_ENDED")
			step("a, still a zombie", ta, 409, "STALE_TOKEN")

			// The listing shows the lease's term as last read (here, by
			// a poll as Run makes).
			if err := p.src.Poll(t.Context()); err != nil {
				t.Fatal(err)
			}
			var st map[string]any
			for _, f := range doHTTP(t, http.MethodGet, p.r.url+"/v1/fences", "", "").body["fences"].([]any) {
				if f := f.(map[string]any); f["name"] == fence {
					st = f
				}
			}
			if st == nil || st["hasLeader"] == true {
				t.Fatalf("GET /v1/fences: got %v for %s, want it listed with no leader", st, fence)
			}
		})
	}
}

// TestRedisLeaseReadBeforeUseNotLimited: the reads of a fence read before
// use are not the verify limiter's to refuse: each new holder's first
// write is a token above everything memory knows, yet with a budget of
// one verification none is OVERLOADED.
func TestRedisLeaseReadBeforeUseNotLimited(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr, Protocol: 2})
	t.Cleanup(func() { c.Close() })
	src, err := redislease.New(c, redislease.Config{PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	routes, err := election.ParseRoutes("lease-*=redis-lease")
	if err != nil {
		t.Fatal(err)
	}
	pc := proxy.DefaultConfig()
	pc.VerifyRate, pc.VerifyBurst = 0.001, 1
	r := startReplicaWith(t, replicaConfig{
		watch: true, proxy: pc, http: api.DefaultHTTPServerConfig(), routes: routes,
		others:        map[string]election.Source{election.SourceRedisLease: src},
		readBeforeUse: func(backend, _ string) bool { return backend == proxy.BackendPostgres },
	})
	pgc := db(t)
	table := ledgerTable(t, pgc)
	fence := "lease-" + fenceName(t)
	k := src.Keys(fence)
	for i := range 3 {
		w := &leaseWorker{c: c, k: k, id: fmt.Sprint("worker-", i)}
		tok := w.acquire(t, time.Minute)
		if got := execHTTP(t, r, fence, tok, insert(table, w.id, tok)); got.code != http.StatusOK {
			t.Fatalf("holder %d, token %d: got HTTP %d %s, want 200", i, tok, got.code, got.reason)
		}
		w.release(t)
	}
}

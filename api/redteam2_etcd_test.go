package api_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/api"
	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/postgres"
	"github.com/fencegate/fencegate/tokens"
)

// Red-team tests (round 2) of the etcd term source through the gateway.

// stored counts the ledger rows of worker with token.
func stored(t *testing.T, table, worker string, token int64) int {
	t.Helper()
	var n int
	if err := db(t).QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE worker = $1 AND token = $2", worker, token).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func wantRefused(t *testing.T, what string, got httpReply) {
	t.Helper()
	if got.code == http.StatusOK {
		t.Errorf("%s: accepted (%v), want a refusal", what, got.body)
	}
}

// Tokens of one election presented to another fence whose name shares a
// prefix with it (f, f-2, and a hostile key at a deeper path of f's
// election holding f-2's revision) must be refused and store nothing.
func TestRedTeam2CrossElectionTokens(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	table := ledgerTable(t, c)
	f := fenceName(t)
	f2 := f + "-2"
	cli := newEtcdClient(t)
	a := campaign(t, cli, f, "a")
	b := campaign(t, cli, f2, "b")
	// A hostile, lease-less key deep under f2's election, created after
	// b: not f2's leader.
	pr, err := cli.Put(t.Context(), prefix+"/"+f2+"/x/y", "hostile")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.Delete(context.WithoutCancel(t.Context()), prefix+"/"+f2+"/x/y") })
	waitTerm(t, r, f, a.token)
	waitTerm(t, r, f2, b.token)

	cases := []struct {
		fence string
		token int64
	}{
		{f2, a.token}, {f, b.token}, {f, pr.Header.Revision}, {f2, pr.Header.Revision},
	}
	for _, cs := range cases {
		worker := fmt.Sprintf("x-%s-%d", cs.fence, cs.token)
		got := execHTTP(t, r, cs.fence, cs.token, insert(table, worker, cs.token))
		wantRefused(t, fmt.Sprintf("token %d on fence %s", cs.token, cs.fence), got)
		if n := stored(t, table, worker, cs.token); n != 0 {
			t.Errorf("token %d on fence %s: %d rows stored", cs.token, cs.fence, n)
		}
	}
	// Each leader still writes to its own fence.
	for _, l := range []struct {
		fence string
		token int64
	}{{f, a.token}, {f2, b.token}} {
		if got := execHTTP(t, r, l.fence, l.token, insert(table, "leader-"+l.fence, l.token)); got.code != http.StatusOK {
			t.Errorf("leader of %s: got HTTP %d %v", l.fence, got.code, got.body)
		}
	}
}

// A fence reset forged by a plain etcd put under the resets prefix
// ("<prefix>-resets/<fence>" here, /fencegate/resets/ in serve) lowers
// what the other replicas remember. It must not let a stale token be
// stored: the backend's mark is untouched. Both an etcd fence and a
// monotonic one.
func TestRedTeam2ForgedResetPut(t *testing.T) {
	routes, err := election.ParseRoutes("mono-*=monotonic")
	if err != nil {
		t.Fatal(err)
	}
	rc := replicaConfig{watch: true, proxy: proxy.DefaultConfig(), http: api.DefaultHTTPServerConfig(), routes: routes}
	r1, r2 := startReplicaWith(t, rc), startReplicaWith(t, rc)
	c := db(t)
	table := ledgerTable(t, c)
	cli := newEtcdClient(t)
	ok := func(what string, got httpReply) {
		t.Helper()
		if got.code != http.StatusOK {
			t.Fatalf("%s: got HTTP %d %s (%v), want 200", what, got.code, got.reason, got.body)
		}
	}
	forge := func(fence string) {
		t.Helper()
		for _, v := range []string{"0", "1 by=someone"} {
			if _, err := cli.Put(t.Context(), prefix+"-resets/"+fence, v); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range []*replica{r1, r2} {
			waitFor(t, "forged reset applied on "+fence, func() bool {
				v := metricValue(t, r, "fencegate_fence_high_water", map[string]string{"fence": fence})
				return v <= 1
			})
		}
	}

	// etcd fence.
	fence := fenceName(t)
	a := campaign(t, cli, fence, "a")
	waitTerm(t, r1, fence, a.token)
	waitTerm(t, r2, fence, a.token)
	ok("a on r2", execHTTP(t, r2, fence, a.token, insert(table, "a", a.token)))
	a.resign(t)
	b := campaign(t, cli, fence, "b")
	waitTerm(t, r1, fence, b.token)
	waitTerm(t, r2, fence, b.token)
	ok("b on r1", execHTTP(t, r1, fence, b.token, insert(table, "b", b.token)))
	forge(fence)
	before := stored(t, table, "a", a.token)
	for _, r := range []*replica{r1, r2} {
		wantRefused(t, "stale a after forged reset", execHTTP(t, r, fence, a.token, insert(table, "a", a.token)))
	}
	if n := stored(t, table, "a", a.token); n != before {
		t.Errorf("etcd fence: a's stale write stored after a forged reset (%d rows, had %d)", n, before)
	}

	// monotonic fence.
	mono := "mono-" + fenceName(t)
	ok("5 on r2", execHTTP(t, r2, mono, 5, insert(table, "m5", 5)))
	ok("9 on r1", execHTTP(t, r1, mono, 9, insert(table, "m9", 9)))
	forge(mono)
	before = stored(t, table, "m5", 5)
	for _, tok := range []int64{5, 6, 8} {
		for _, r := range []*replica{r1, r2} {
			wantRefused(t, fmt.Sprintf("monotonic %d after forged reset", tok), execHTTP(t, r, mono, tok, insert(table, fmt.Sprint("m", tok), tok)))
		}
	}
	if n := stored(t, table, "m5", 5) - before + stored(t, table, "m6", 6) + stored(t, table, "m8", 8); n != 0 {
		t.Errorf("monotonic fence: %d stale rows stored after a forged reset", n)
	}
	var hw int64
	if err := c.QueryRow(t.Context(), "SELECT token FROM fencegate.fences WHERE name = $1", mono).Scan(&hw); err != nil || hw != 9 {
		t.Errorf("monotonic fence's mark in PostgreSQL: %d (%v), want 9", hw, err)
	}
}

// cutProxy forwards TCP to target until cut; then it drops every
// connection and every new one.
type cutProxy struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{lis: lis, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		lis.Close()
		p.setCut(true)
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[u] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(u, c); u.Close(); c.Close() }()
		go func() { defer p.wg.Done(); _, _ = io.Copy(c, u); u.Close(); c.Close() }()
	}
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
			delete(p.conns, c)
		}
	}
}

// A replica cut off from etcd knows it: its watch is lost (Synced false,
// /readyz 503). Meanwhile the leader's lease is revoked and another is
// elected. The replica must not take the ended term's writes as current
// for as long as it cannot tell: a write with the old token is refused
// (ETCD_UNAVAILABLE, or any refusal), not stored.
func TestRedTeam2ReplicaCutFromEtcdAcceptsEndedTerm(t *testing.T) {
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	target := strings.TrimPrefix(strings.TrimPrefix(etcdEndpoints[0], "http://"), "https://")
	cp := newCutProxy(t, target)
	pcli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + cp.lis.Addr().String()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pcli.Close() })
	w, err := election.NewWatcher(pcli, election.WatcherConfig{Prefix: prefix, CheckInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "synced", w.Synced)
	pg, err := postgres.Open(t.Context(), pgDSN, postgres.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	if err := pg.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	gw, err := proxy.New(proxy.DefaultConfig(), proxy.Options{Terms: w, Postgres: pg})
	if err != nil {
		t.Fatal(err)
	}
	write := func(worker string, token int64) error {
		stmt := postgres.Statement{SQL: "INSERT INTO " + table + "(worker, token) VALUES ($1, $2)", Params: []any{worker, token}}
		_, _, err := gw.Exec(t.Context(), fence, fmt.Sprint(token), []postgres.Statement{stmt})
		return err
	}

	cli := newEtcdClient(t)
	a := campaign(t, cli, fence, "a")
	waitFor(t, "term a", func() bool { return w.Term(fence).Rev == a.token })
	if err := write("a", a.token); err != nil {
		t.Fatalf("a's first write: %v", err)
	}

	cp.setCut(true)
	waitFor(t, "watch lost", func() bool { return !w.Synced() })
	// a's term ends in etcd (lease revoked) and b is elected.
	if _, err := cli.Revoke(t.Context(), a.session.Lease()); err != nil {
		t.Fatal(err)
	}
	b := campaign(t, cli, fence, "b")
	if b.token <= a.token {
		t.Fatalf("b's token %d not above a's %d", b.token, a.token)
	}
	if w.Synced() {
		t.Fatal("watch synced through a cut proxy")
	}

	// The real leader, above memory, cannot be verified: refused.
	if err := write("b-during-cut", b.token); err == nil {
		t.Logf("b accepted during the cut")
	} else if r, ok := tokens.AsRefusal(err); ok {
		t.Logf("real leader b (token %d) during the cut: %s", b.token, r.Reason)
	}
	err = write("a-zombie", a.token)
	r, isRefusal := tokens.AsRefusal(err)
	switch {
	case err == nil:
		t.Errorf("zombie a (token %d, lease revoked, b=%d elected) accepted by a replica whose watch is known lost (Synced=false, memory term %d)",
			a.token, b.token, w.Term(fence).Rev)
	case !isRefusal:
		t.Logf("zombie refused with %v", err)
	default:
		t.Logf("zombie refused: %s", r.Reason)
	}
	if n := stored(t, table, "a-zombie", a.token); n != 0 {
		t.Errorf("PostgreSQL holds %d row(s) of zombie a (token %d) written after its lease was revoked and b (token %d) was elected", n, a.token, b.token)
	}
	var hw int64
	if err := c.QueryRow(t.Context(), "SELECT token FROM fencegate.fences WHERE name = $1", fence).Scan(&hw); err == nil {
		t.Logf("fence %s high-water in PostgreSQL: %d", fence, hw)
	}
	// Heal: the replica follows again and refuses a from memory.
	cp.setCut(false)
	waitFor(t, "resynced on b", func() bool { return w.Synced() && w.Term(fence).Rev == b.token })
	if err := write("a-late", a.token); err == nil {
		t.Errorf("zombie a accepted after the replica resynced")
	}
	if err := write("b", b.token); err != nil {
		t.Errorf("b's write: %v", err)
	}
}

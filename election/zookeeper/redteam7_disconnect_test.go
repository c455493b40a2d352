package zookeeper_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/netfault"
	"github.com/fencegate/fencegate/election/zookeeper"
	"github.com/fencegate/fencegate/tokens"
)

// newProxy is a netfault proxy to target, closed when the test ends. Its
// Drop is fencegate cut off from ZooKeeper, the workers not: every
// connection closed, new ones closed at once, until Restore.
func newProxy(t *testing.T, target string) *netfault.Proxy {
	t.Helper()
	p, err := netfault.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestRedTeam7DisconnectedMemoryStaysCurrent: the etcd watcher reports
// itself not Fresh while its watch is lost, so the gateway reads etcd
// before admitting a write (proxy/gateway.go: "a zombie would be let
// through for as long as the watch stays lost"). The ZooKeeper source has
// no such signal: cut off from ZooKeeper, it goes on deciding from memory,
// for as long as the cut lasts. Here the leader's node is deleted and a new
// leader elected while fencegate is cut off, for longer than the session
// timeout; the ended term is still admitted from memory (Accept, fresh)
// while the new leader's token cannot be verified (ETCD_UNAVAILABLE): the
// zombie writes, the real leader is refused.
func TestRedTeam7DisconnectedMemoryStaysCurrent(t *testing.T) {
	root := testRoot(t)
	proxy := newProxy(t, zkAddr)
	s, err := zookeeper.New(zookeeper.Config{Servers: []string{proxy.Addr()}, Root: root, SessionTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); s.Close() })
	waitFor(t, "session", s.Connected)
	router, err := election.NewRouter(nil, []election.Route{{Pattern: "orders", Kind: election.SourceZooKeeper}},
		map[string]election.Source{election.SourceZooKeeper: s})
	if err != nil {
		t.Fatal(err)
	}

	w1, w2 := connect(t), connect(t)
	el := root + "/orders"
	mkdirs(t, w1, el)
	p1, z1 := candidate(t, w1, el, "latch-", "w1")
	if _, held, err := s.Verify(t.Context(), "orders", z1); err != nil || !held {
		t.Fatalf("verify leader %d: held %v (%v)", z1, held, err)
	}

	proxy.Drop()
	waitFor(t, "fencegate's ZooKeeper connection to drop", func() bool { return !s.Connected() })
	cutAt := time.Now()
	if err := w1.Delete(p1, -1); err != nil { // w1's term ends
		t.Fatal(err)
	}
	_, z2 := candidate(t, w2, el, "latch-", "w2") // and w2 leads
	time.Sleep(3 * time.Second)                   // past fencegate's session timeout

	vctx, vcancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, _, verr := router.Verify(vctx, "orders", z2)
	vcancel()
	term := router.Term("orders")
	o, fresh := tokens.Decide(tokens.Token(z1), 0, term), router.Fresh("orders")
	if o == tokens.Accept && fresh {
		t.Errorf("cut off from ZooKeeper for %v (session timeout 2s): ended term %d decided %v from memory %+v, Fresh %v "+
			"(no read); the new leader's token %d: verify error %v",
			time.Since(cutAt).Round(100*time.Millisecond), z1, o, term, fresh, z2, verr)
	}

	// Reconnected (a new session), memory must follow ZooKeeper again.
	proxy.Restore()
	waitFor(t, "a new session", s.Connected)
	waitTerm(t, s, "orders", z2, z2)
}

package zookeeper_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/zookeeper"
	"github.com/fencegate/fencegate/election/zookeeper/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam21SilentCutMemoryStaysFresh: the ZooKeeper source is Fresh
// while go-zookeeper says it has a session (Connected) and the election
// was read in this connection. TestRedTeam7 covered a hard cut (resets),
// which the client sees at once. A silent partition (packets dropped: a
// firewall, a dead switch, a peer host frozen) is seen by go-zookeeper
// only when its read deadline passes: two thirds of the session timeout
// after the last packet (6.7 s with fencegate's default 10 s; 13 s with
// 20 s, 26 s with ZooKeeper's default maximum of 40 s). Nothing else
// checks the link: unlike the etcd watcher, which sends a progress
// request every CheckInterval (2 s) and stops being Fresh when one goes
// unanswered for an interval, the source sends no request of its own.
//
// Attack: fencegate's link to ZooKeeper goes silent (netfault Cut) right
// after a successful read; the workers still reach ZooKeeper. w1's term
// ends (its node is deleted; in production: w1 was GC-paused before the
// cut and its session expired during it) and w2 leads. 4.5 s later (past the etcd watcher's whole detection bound)
// the source still reports itself Connected and Fresh with w1 as the
// leader: the gateway decides from memory and accepts the zombie w1's
// token, without a read, while w2's real token cannot be verified
// (ETCD_UNAVAILABLE). Rule 2 does not help until w2 has written, which
// it cannot.
//
// Expected: the source notices a silent link within a bound of its own
// (as the watcher's progress check does), not the session timeout's
// read deadline, and reports itself not Fresh, so that the zombie's
// writes are read first and refused. Severity: high (zombie writes
// accepted and the real leader refused for up to 2/3 of fencegate's
// ZooKeeper session timeout, with no backstop in the backend).
func TestRedTeam21SilentCutMemoryStaysFresh(t *testing.T) {
	// A server that grants production-sized sessions (2 s to 20 s);
	// the package's shared one caps them at 2 s.
	srv, err := throwaway.Start(t.Context(), throwaway.Options{TickTime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	proxy := newProxy(t, srv.Addr())
	root := testRoot(t)
	// fencegate's default session timeout (DefaultSessionTimeout, 10 s).
	s, err := zookeeper.New(zookeeper.Config{Servers: []string{proxy.Addr()}, Root: root})
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

	worker := func() *zk.Conn {
		c, _, err := zk.Connect([]string{srv.Addr()}, 4*time.Second, zk.WithLogInfo(false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		waitFor(t, "worker session", func() bool { return c.State() == zk.StateHasSession })
		return c
	}
	w1, w2 := worker(), worker()
	el := root + "/orders"
	mkdirs(t, w1, el)
	p1, z1 := candidate(t, w1, el, "latch-", "w1")
	if _, held, err := s.Verify(t.Context(), "orders", z1); err != nil || !held {
		t.Fatalf("verify leader %d: held %v (%v)", z1, held, err)
	}
	waitFor(t, "the election watched and fresh", func() bool { return router.Fresh("orders") })

	proxy.Cut() // silent: nothing is reset, nothing answers
	cutAt := time.Now()
	if err := w1.Delete(p1, -1); err != nil { // w1's term ends
		t.Fatal(err)
	}
	_, z2 := candidate(t, w2, el, "latch-", "w2") // and w2 leads
	time.Sleep(4500 * time.Millisecond)

	term := router.Term("orders")
	o, fresh, connected := tokens.Decide(tokens.Token(z1), 0, term), router.Fresh("orders"), s.Connected()
	vctx, vcancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, _, verr := router.Verify(vctx, "orders", z2)
	vcancel()
	if o == tokens.Accept && fresh {
		t.Errorf("silently cut off from ZooKeeper for %v: w1's ended term %d decided %v from memory %+v, Fresh %v, Connected %v "+
			"(no read before the write); w2's current token %d: verify error %v",
			time.Since(cutAt).Round(100*time.Millisecond), z1, o, term, fresh, connected, z2, verr)
		for deadline := time.Now().Add(30 * time.Second); s.Connected() && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("the source noticed the cut %v after it began", time.Since(cutAt).Round(100*time.Millisecond))
	}

	proxy.Restore()
	waitFor(t, "a session again", s.Connected)
	waitTerm(t, s, "orders", z2, z2)
}

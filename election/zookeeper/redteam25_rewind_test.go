package zookeeper_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/zookeeper"
	"github.com/fencegate/fencegate/election/zookeeper/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam25RewoundZooKeeperKeepsEndedTerm: the source orders reads of
// an election by the election node's pzxid (publish drops a read whose
// pzxid is below memory's ObservedRev) and trusts that order across
// sessions, because it Syncs after each new connection. That holds while
// the ZooKeeper fencegate talks to has one history. It does not when the
// history goes back: a ZooKeeper restored from a backup or snapshot, a
// standalone server rebuilt, an ensemble replaced behind the same
// address (DNS, a VIP, a Kubernetes Service): the election's znodes are
// back in a state older than what fencegate saw. (A ZooKeeper whose whole
// history is behind is refused by ZooKeeper itself, lastZxidSeen: the
// source then stays disconnected, not Fresh, and refuses.) The etcd watcher (a restored etcd),
// pgterm and redislease (rows and counters going back) all detect such a
// rewind and refuse the terms of before; the ZooKeeper source has no
// such check, and its pzxid guard makes it worse: every read of the new
// history is taken for an old one and dropped, while readIn still marks
// the election read in this connection (Fresh).
//
// Attack: w1 leads in ZooKeeper A (term z1). fencegate loses A; w1's term
// ends meanwhile (its node is gone: its session expired while it was
// paused). fencegate's ZooKeeper address now reaches B, a ZooKeeper whose
// election is behind A's (here: a second server whose other znodes have
// moved on past every zxid fencegate saw, so ZooKeeper's lastZxidSeen
// check lets fencegate's client in; in production a quorum restored
// from a backup, whose new epoch puts every zxid above A's while the
// restored znodes keep theirs), where w0 leads the same election (term
// c0 < z1). fencegate gets a new session with B, and its watch re-reads the
// election there.
//
// What happened (on this code): the read of B (pzxid below A's) is
// dropped as "older"; memory keeps w1 as the leader with the ended term
// z1, and the election counts as Fresh (read in this connection, heartbeat
// answered). The gateway decides the zombie w1's token Accept from memory
// without a read; w0, the leader the ZooKeeper in use shows, has its
// Verify answered from memory (w1 leading) and is STALE. This lasts until
// the election's pzxid in B passes the one seen in A: until its children
// next change in B (with a new epoch's zxids), or, while w0 keeps
// leading, for ever.
//
// What should happen: a read synced in a new session that shows the
// election's pzxid (or the leader's czxid) below one already seen is a
// rewind: memory takes the read (the leader is w0 or none, never w1) and,
// as the etcd watcher does, refuses every term up to the highest seen
// before (TERM_ENDED), so neither the zombie nor a reissued number passes.
//
// Severity: high (a zombie's writes accepted and the real leader refused
// after a ZooKeeper restore or rebuild, with no backstop in the backend).
func TestRedTeam25RewoundZooKeeperKeepsEndedTerm(t *testing.T) {
	b, err := throwaway.Start(t.Context(), throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	proxy := newProxy(t, zkAddr) // fencegate's ZooKeeper address: A for now
	root := testRoot(t)
	s, err := zookeeper.New(zookeeper.Config{Servers: []string{proxy.Addr()}, Root: root, SessionTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; s.Close() })
	waitFor(t, "session", s.Connected)
	router, err := election.NewRouter(nil, []election.Route{{Pattern: "orders", Kind: election.SourceZooKeeper}},
		map[string]election.Source{election.SourceZooKeeper: s})
	if err != nil {
		t.Fatal(err)
	}

	// A: some history, then w1 leads.
	w1 := connect(t)
	el := root + "/orders"
	mkdirs(t, w1, el)
	for i := range 40 {
		p := fmt.Sprintf("%s/burn-%d", root, i)
		if _, err := w1.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		if err := w1.Delete(p, -1); err != nil {
			t.Fatal(err)
		}
	}
	p1, z1 := candidate(t, w1, el, "latch-", "w1")
	if _, held, err := s.Verify(t.Context(), "orders", z1); err != nil || !held {
		t.Fatalf("verify w1 %d: held %v (%v)", z1, held, err)
	}
	waitFor(t, "the election watched and fresh", func() bool { return router.Fresh("orders") })

	// B: a history behind A's, where w0 leads the same election.
	w0, _, err := zk.Connect([]string{b.Addr()}, 2*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w0.Close)
	waitFor(t, "w0 session", func() bool { return w0.State() == zk.StateHasSession })
	mkdirs(t, w0, el)
	_, c0 := candidate(t, w0, el, "latch-", "w0")
	if c0 >= z1 {
		t.Fatalf("B's election is not behind A's: c0 %d, z1 %d", c0, z1)
	}
	// B's history goes on elsewhere, past every zxid fencegate saw in A
	// (a quorum restored from a backup starts a new epoch: all its zxids
	// are above A's), so ZooKeeper lets fencegate's client connect; the
	// election itself keeps the zxids of the backup.
	for i := range 2*int(z1) + 40 {
		p := fmt.Sprintf("/burn-%d", i)
		if _, err := w0.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		if err := w0.Delete(p, -1); err != nil {
			t.Fatal(err)
		}
	}

	proxy.Drop()                              // fencegate loses A
	if err := w1.Delete(p1, -1); err != nil { // w1's term ends in A
		t.Fatal(err)
	}
	proxy.Retarget(b.Addr()) // its address now reaches B
	proxy.Restore()
	switched := time.Now()
	waitFor(t, "a session with B", s.Connected)
	time.Sleep(2 * time.Second) // the watch re-reads the election, several heartbeats pass

	term := router.Term("orders")
	o := tokens.Decide(tokens.Token(z1), tokens.Token(z1), term)
	fresh := router.Fresh("orders")
	vctx, vcancel := context.WithTimeout(t.Context(), 2*time.Second)
	vt, held0, verr := router.Verify(vctx, "orders", c0)
	vcancel()
	o0 := tokens.DecideVerified(tokens.Token(c0), 0, vt, held0)
	if o == tokens.Accept && fresh {
		t.Errorf("%v after fencegate's ZooKeeper address reached a ZooKeeper whose history is behind (w0 leads there, term %d; "+
			"w1's node is in neither): memory %+v is Fresh and decides the zombie w1's ended term %d %v without a read; "+
			"w0's token verified: %+v held %v err %v, decided %v",
			time.Since(switched).Round(100*time.Millisecond), c0, term, z1, o, vt, held0, verr, o0)
	}
}

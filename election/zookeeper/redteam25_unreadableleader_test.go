package zookeeper_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam25UnreadableLeaderKeepsEndedTermFresh: a watch read that
// fails for a reason other than the connection leaves memory as it was,
// and memory still counts as Fresh. Fresh is "the session is up, the
// root's stat was answered within 3 s, and the election was read at
// least once in this connection" (readAt == sessions): it says nothing
// about whether the election's latest read succeeded. The watch reads a
// change as ChildrenW of the election, then Get of the leader's node (its
// data is the leader label; its stat the term). Get needs READ on the
// leader's node; ZooKeeper's ACLs are per node and chosen by its creator
// (Curator's ACLProvider, CREATOR_ALL_ACL in SASL/digest setups, or any
// ACL without READ). The children and the czxid need no READ of it
// (getChildren is checked on the parent; exists/stat are not checked).
//
// Attack: w1 leads with an ordinary node. w2 campaigns with a node whose
// ACL does not grant fencegate READ (here: world gets every permission
// but READ). w1's term ends (its node deleted: resign, or its session
// expired while it was GC-paused) and w2 leads.
//
// What happened (on this code): the child watch fires, ChildrenW shows
// w1's node is gone, Get of w2's node fails with NoAuth, and the watch
// retries with backoff for ever. Memory keeps w1 as the current leader
// with w1's ended term, and Fresh stays true (the heartbeat is answered;
// the connection did not change), so the gateway decides the zombie w1's
// token Accept from memory, with no read before the write, as long as
// w2 leads. Nothing in the backend stands behind it (rule 2 only stops
// w1 once w2 has written, and w2's token cannot be verified: its Verify
// fails NoAuth, ETCD_UNAVAILABLE).
//
// What should happen: an election whose last watch read failed is not
// Fresh (its writes are read first, and refused while it cannot be
// read), or the read takes the term from the leader node's stat (Exists,
// which needs no READ) so that w1's term is known to have ended.
//
// Severity: high (a zombie's writes accepted for as long as the new
// leader's node stays unreadable; the real leader refused), given a
// ZooKeeper where candidate nodes carry an ACL fencegate's session is not
// in, which a mixed fleet or a Curator ACLProvider produces.
func TestRedTeam25UnreadableLeaderKeepsEndedTermFresh(t *testing.T) {
	root := testRoot(t)
	s := startSource(t, root, nil)
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
	waitFor(t, "the election watched and fresh", func() bool { return router.Fresh("orders") })

	// w2's candidate node: every permission to anyone but READ.
	noRead := zk.WorldACL(zk.PermAll &^ zk.PermRead)
	p2, err := w2.Create(el+"/latch-", []byte("w2"), zk.FlagEphemeral|zk.FlagSequence, noRead)
	if err != nil {
		t.Fatal(err)
	}
	_, st2, err := w2.Exists(p2) // stat needs no permission
	if err != nil {
		t.Fatal(err)
	}
	z2 := st2.Czxid
	if err := w1.Delete(p1, -1); err != nil { // w1's term ends; w2 leads
		t.Fatal(err)
	}
	endedAt := time.Now()
	time.Sleep(2500 * time.Millisecond) // well past one watch event and its retries

	term := router.Term("orders")
	o := tokens.Decide(tokens.Token(z1), tokens.Token(z1), term)
	fresh := router.Fresh("orders")
	vctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, held2, verr := router.Verify(vctx, "orders", z2)
	cancel()
	if o == tokens.Accept && fresh {
		t.Errorf("%v after w1's term %d ended and w2 (term %d, node not readable by fencegate) leads: memory %+v is Fresh "+
			"and decides the zombie w1's token %v without a read; w2's token: held %v, verify error %v",
			time.Since(endedAt).Round(100*time.Millisecond), z1, z2, term, o, held2, verr)
	}
}

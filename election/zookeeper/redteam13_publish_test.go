package zookeeper

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencegate/fencegate/election/zookeeper/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

// Red-team round 13. publish orders reads by the election node's pzxid,
// but a read that found no election node has none: publish takes it
// whatever its age ("at worst it makes the next write verify") and leaves
// ObservedRev where it was. Both halves are wrong, in the two tests below.
// The interleaving is the one publish's own comment names: a Verify's read
// (Sync, Children, Get, in a goroutine of its own) answered before a watch
// read and folded (Verify: s.publish(name, r.st)) after it. Each test
// takes that read for real, from ZooKeeper, and folds it as Verify does.
// The election node going and coming is ordinary: Curator makes it a
// container node, which ZooKeeper removes once it is empty, and
// `deleteall` removes it with its candidates at once.

// rt13Env is a throwaway ZooKeeper of the test's own (this internal test
// cannot reach the package's, zookeeper_test.zkAddr), a running Source and
// a worker session.
type rt13Env struct {
	s      *Source
	worker *zk.Conn
}

func rt13Setup(t *testing.T) *rt13Env {
	t.Helper()
	srv, err := throwaway.Start(t.Context(), throwaway.Options{})
	if err != nil { // ZooKeeper missing included: make deps installs it
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	s, err := New(Config{Servers: []string{srv.Addr()}, Root: "/rt13", SessionTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); s.Close() })
	w, _, err := zk.Connect([]string{srv.Addr()}, 2*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	rt13Wait(t, "sessions", func() bool { return s.Connected() && w.State() == zk.StateHasSession })
	if _, err := w.Create("/rt13", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	return &rt13Env{s: s, worker: w}
}

func rt13Wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// candidate creates the election node and an ephemeral sequential
// candidate in it; it returns the candidate's path and czxid.
func (e *rt13Env) candidate(t *testing.T, value string) (string, int64) {
	t.Helper()
	if _, err := e.worker.Create("/rt13/orders", nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	p, err := e.worker.Create("/rt13/orders/latch-", []byte(value), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	_, st, err := e.worker.Exists(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, st.Czxid
}

// TestRedTeam13NoNodeReadRevivesEndedTerm: leader A leads; a Verify reads
// it. Then A's node and the election node go in one multi-op: the watch
// reads no node and publishes no leader, but ObservedRev stays at the
// pzxid of A's read. The Verify's read of A, folded now, is not "older
// than the one published" (equal pzxid) and is published: A's ended term
// is current again in memory and Fresh, decided Accept from memory with no
// read, until the election node is created again (with no one campaigning:
// for good).
func TestRedTeam13NoNodeReadRevivesEndedTerm(t *testing.T) {
	e := rt13Setup(t)
	pa, za := e.candidate(t, "a")
	if _, held, err := e.s.Verify(t.Context(), "orders", za); err != nil || !held {
		t.Fatalf("verify A's token %d: held %v, %v", za, held, err)
	}
	rt13Wait(t, "the watch to read the election", func() bool { return e.s.Fresh("orders") && e.s.Term("orders").Rev == za })

	// A concurrent Verify's read, taken while A leads.
	verifyRead, _, err := e.s.read(e.s.path("orders"), false)
	if err != nil {
		t.Fatal(err)
	}
	// A's term ends, and the election node goes with it.
	if _, err := e.worker.Multi(&zk.DeleteRequest{Path: pa, Version: -1}, &zk.DeleteRequest{Path: "/rt13/orders", Version: -1}); err != nil {
		t.Fatal(err)
	}
	rt13Wait(t, "the watch to see the election gone", func() bool { return !e.s.Term("orders").HasLeader() })
	// The Verify's read is folded.
	e.s.publish("orders", verifyRead)

	time.Sleep(100 * time.Millisecond) // the watch would have corrected it by now, if it could
	term, fresh := e.s.Term("orders"), e.s.Fresh("orders")
	if exists, _, _ := e.worker.Exists("/rt13/orders"); !exists && fresh && tokens.Decide(tokens.Token(za), 0, term) == tokens.Accept {
		t.Fatalf("ZooKeeper has no election %s (no candidate, no leader), but memory holds %+v, Fresh %v: A's ended "+
			"term %d is decided %v from memory, with no read, until someone campaigns again",
			"/rt13/orders", term, fresh, za, tokens.Accept)
	}
}

// TestRedTeam13StaleNoNodeReadEndsCurrentTerm: the other direction. A
// Verify reads the election before its node exists (no node); the node
// and leader B are created, and the watch (armed by that Verify) reads and
// publishes B; then the Verify's no-node read is folded and taken: no
// leader in memory, Last = B's term. B, current in ZooKeeper, is refused
// TERM_ENDED from memory (Decide: Ended; the source is Fresh, so the
// gateway does not read first) until the election's children change
// again: with a settled latch, indefinitely. Round 7's
// TestRedTeam7StaleNoLeaderReadEndsCurrentTerm, in the branch its fix left
// out (st.exists == false).
func TestRedTeam13StaleNoNodeReadEndsCurrentTerm(t *testing.T) {
	e := rt13Setup(t)
	if _, held, err := e.s.Verify(t.Context(), "orders", 1); err != nil || held {
		t.Fatalf("verify in a missing election: held %v, %v", held, err)
	}
	verifyRead, _, err := e.s.read(e.s.path("orders"), false)
	if err != nil || verifyRead.exists {
		t.Fatalf("read of a missing election: %+v, %v", verifyRead, err)
	}
	_, zb := e.candidate(t, "b")
	rt13Wait(t, "the watch to publish B", func() bool { return e.s.Term("orders").Rev == zb })
	e.s.publish("orders", verifyRead)

	time.Sleep(100 * time.Millisecond)
	term, fresh := e.s.Term("orders"), e.s.Fresh("orders")
	if o := tokens.Decide(tokens.Token(zb), 0, term); fresh && (o == tokens.Ended || o == tokens.Stale || o == tokens.Unknown) {
		t.Fatalf("B (term %d) leads in ZooKeeper and nothing changed since the watch read it, but memory holds %+v, "+
			"Fresh %v: B's token is decided %v from memory, with no read, until the election changes again",
			zb, term, fresh, o)
	}
}

package zookeeper_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencegate/fencegate/election/zookeeper"
)

// TestUnreadableLeaderNode: a leader's node whose ACL denies fencegate READ
// still has its term read (from its stat); only its label is unknown.
func TestUnreadableLeaderNode(t *testing.T) {
	root := testRoot(t)
	s := startSource(t, root, nil)
	w := connect(t)
	el := root + "/orders"
	mkdirs(t, w, el)
	p, err := w.Create(el+"/latch-", []byte("w"), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll&^zk.PermRead))
	if err != nil {
		t.Fatal(err)
	}
	_, st, err := w.Exists(p)
	if err != nil {
		t.Fatal(err)
	}
	got, held, err := s.Verify(t.Context(), "orders", st.Czxid)
	if err != nil || !held {
		t.Fatalf("verify %d: got held %v (%v), want held", st.Czxid, held, err)
	}
	if got.Rev != st.Czxid || got.Key != p || got.Leader != "" {
		t.Fatalf("got Rev %d Key %q Leader %q, want Rev %d Key %q and no label", got.Rev, got.Key, got.Leader, st.Czxid, p)
	}
	waitFor(t, "the election watched and fresh", func() bool { return s.Fresh("orders") })
}

// TestUnreadableElectionNotFresh: once the watch cannot read its election
// (here the election node's ACL no longer grants READ when the watch's
// event arrives), memory is not fresh until a read succeeds again.
func TestUnreadableElectionNotFresh(t *testing.T) {
	proxy := newProxy(t, zkAddr)
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
	w := connect(t)
	el := root + "/orders"
	mkdirs(t, w, el)
	_, z1 := candidate(t, w, el, "latch-", "w1")
	if _, held, err := s.Verify(t.Context(), "orders", z1); err != nil || !held {
		t.Fatalf("verify %d: got held %v (%v), want held", z1, held, err)
	}
	waitFor(t, "the election watched and fresh", func() bool { return s.Fresh("orders") })

	// ZooKeeper tells no watcher that may not read the node of a change:
	// the watch's event is sent while READ is granted, and arrives (the
	// proxy holds it) once it is not.
	proxy.Stall()
	candidate(t, w, el, "latch-", "w2")
	if _, err := w.SetACL(el, zk.WorldACL(zk.PermAll&^zk.PermRead), -1); err != nil {
		proxy.Release()
		t.Fatal(err)
	}
	proxy.Release()
	waitFor(t, "the election not fresh", func() bool { return !s.Fresh("orders") })
	if _, _, err := s.Verify(t.Context(), "orders", z1); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("verify of an unreadable election: got error %v, want %v", err, zk.ErrNoAuth)
	}
	if !s.Connected() {
		t.Fatal("not connected: the election should be not fresh for its failed read alone")
	}

	if _, err := w.SetACL(el, zk.WorldACL(zk.PermAll), -1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the election fresh again", func() bool { return s.Fresh("orders") && s.Term("orders").Rev == z1 })
}

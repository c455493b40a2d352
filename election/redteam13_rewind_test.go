package election

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/election/embedded"
)

// TestRedTeam13VerifyTrustsMemoryOverRewoundEtcd: while the watch is down
// (Fresh false: lost, or listing again with backoff, up to 5 s, after an
// outage), the gateway reads etcd before every write, and trusts Verify's
// answer. Verify's linearizable read of a rewound etcd (restored without
// --bump-revision, or rebuilt empty) comes back with a revision below the
// state memory published before the rewind; fold/set take it as "too old
// to publish" and Verify answers from that memory: the zombie's term, whose
// key etcd no longer has, is held, the current leader's. Only applyList
// notices a revision going backwards; Verify's read is the same evidence
// and is ignored.
func TestRedTeam13VerifyTrustsMemoryOverRewoundEtcd(t *testing.T) {
	ctx := t.Context()
	srv1, err := embedded.Start(ctx, embedded.Config{Dir: t.TempDir(), NoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			srv1.Close()
		}
	})
	c, err := clientv3.New(clientv3.Config{Endpoints: srv1.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	resp, err := c.Put(ctx, "/rt13/jobs/a", "a")
	if err != nil {
		t.Fatal(err)
	}
	termA := resp.Header.Revision
	for range 5 {
		if _, err := c.Put(ctx, "/other", "x"); err != nil {
			t.Fatal(err)
		}
	}
	w, err := NewWatcher(c, WatcherConfig{Prefix: "/rt13", CheckInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	waitFor(t, "watcher synced", w.Synced)
	// Memory has a's term, observed at the head revision.
	head, err := c.Get(ctx, "/rt13/jobs/", clientv3.WithFirstCreate()...)
	if err != nil {
		t.Fatal(err)
	}
	if _, held, err := w.Verify(ctx, "jobs", termA); err != nil || !held {
		t.Fatalf("a's token %d before: held %v, %v", termA, held, err)
	}
	// The watch is down from here on (Fresh false): every write reads.
	cancel()
	<-done

	srv1.Close()
	stopped = true
	srv2, err := embedded.Start(ctx, embedded.Config{Dir: t.TempDir(), NoFsync: true, ClientURL: srv1.ClientURL(), PeerURL: srv1.PeerURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv2.Close)

	term, held, err := w.Verify(ctx, "jobs", termA)
	if err != nil {
		t.Fatal(err)
	}
	now, err := c.Get(ctx, "/rt13/jobs/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if held || term.HasLeader() {
		t.Fatalf("etcd went back from revision %d to %d and has %d key(s) in election jobs; Fresh %v, so the write is "+
			"verified, and Verify answers %+v held %v for a's token %d: the term of a key etcd does not have is "+
			"affirmed as the current leader's",
			head.Header.Revision, now.Header.Revision, len(now.Kvs), w.Fresh("jobs"), term, held, termA)
	}
}

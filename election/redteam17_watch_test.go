package election

import (
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/election/netfault"
)

// TestRedTeam17RestoreBetweenListAndWatch: firstStream stops clientv3 from
// resuming a lost watch on a restored etcd, but a session's list and its
// watch are two requests too, and nothing checks that they reached the same
// etcd history. etcd is restored from a backup without --bump-revision (a
// second etcd behind the same address) after the session has listed the
// old etcd and before its watch stream opens; the restored etcd is already
// past the list's revision. The watch, the session's first and only
// stream, is created on the restored etcd from the old list's revision and
// delivers the new history's events over the old history's candidates:
// exactly the state today's change exists to prevent. Synced turns true,
// progress requests are answered, and the old history's leader of "jobs",
// whose key the restored etcd does not have, stays current in memory for
// good (its zombie's writes are admitted from memory, Fresh true).
// testHookBeforeList places the restore in that window (in production a
// race, each time a session starts: after every outage, compaction or
// lost stream); the hook waits until the client's connection is the
// restored etcd's, so the watch stream is opened there.
//
// Expected: the Watcher must not report Synced with candidates the etcd it
// watches does not have (e.g. check that the watch's etcd is the list's,
// or list after the watch is created, or treat any header mismatch as a
// lost stream); once it follows the restored etcd, jobs has no leader.
func TestRedTeam17RestoreBetweenListAndWatch(t *testing.T) {
	before, after := ownEtcd(t), ownEtcd(t)
	proxy, err := netfault.New(hostOf(before))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	oldEtcd, newEtcd := clientAt(t, before.ClientURL()), clientAt(t, after.ClientURL())

	const prefix = "/rt17gap"
	old, err := oldEtcd.Put(t.Context(), prefix+"/jobs/old", "old")
	if err != nil {
		t.Fatal(err)
	}
	had := fillPast(t, oldEtcd, old.Header.Revision+10)
	// The restored etcd: no leader of jobs, and a revision past the old
	// one's.
	fillPast(t, newEtcd, had+5)

	// The default check interval's order of magnitude: a progress request
	// sent before etcd has moved the new watch (started in the past) to
	// its synced group is dropped, and a check of 100 ms would sometimes
	// relist by that accident.
	viaProxy := clientAt(t, "http://"+proxy.Addr())
	probe, err := newEtcd.Get(t.Context(), "/filler")
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWatcher(viaProxy, WatcherConfig{Prefix: prefix, CheckInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var armed, swapped atomic.Bool
	w.testHookBeforeList = func(int64) {
		// Listed the old etcd; the restore happens now, before the watch.
		if armed.CompareAndSwap(true, false) {
			proxy.Retarget(hostOf(after))
			proxy.Drop()
			proxy.Restore()
			// Until the client's connection is the restored etcd's.
			for range 200 {
				r, err := viaProxy.Get(t.Context(), "/filler")
				if err == nil && r.Header.MemberId == probe.Header.MemberId {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			swapped.Store(true)
		}
	}
	runWatcher(t, w)
	waitFor(t, "watcher synced", w.Synced)
	waitFor(t, "the old history's leader", func() bool { return w.Term("jobs").Rev == old.Header.Revision })

	// The watch is lost (a blip, still to the old etcd) and the prefix is
	// listed again there; the restore lands between that list and the
	// watch.
	armed.Store(true)
	proxy.Drop()
	proxy.Restore()
	waitFor(t, "the restore between a list and its watch", swapped.Load)

	awaitFollows(t, w, newEtcd, prefix)
	// Give a relist every chance to happen: several check intervals.
	time.Sleep(3 * time.Second)
	keys, err := newEtcd.Get(t.Context(), prefix+"/jobs/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Term("jobs"); got.HasLeader() && w.Synced() {
		t.Fatalf("Synced true, watching the restored etcd (%d key(s) under jobs), yet memory holds the old "+
			"history's leader of jobs: %+v (lists %d): the list came from the old etcd and the watch's events from "+
			"the restored one", keys.Count, got, w.lists.Load())
	}
}

// TestRedTeam17RestoredPastRevisionReissuesTerm: the rewind defence
// (floor: every term up to the revision applied before a rewind is refused)
// is raised only when a list or a Verify read comes back with a revision
// below the one applied. etcd is restored from a backup without
// --bump-revision and, by the time fencegate reconnects, the restored etcd
// has passed the revision fencegate had reached (the very case today's
// change is about): no revision ever goes backwards, the floor stays 0, and
// the new history's leader, whose key got the same create revision as the
// old history's leader (etcd hands out the numbers again), is current with
// the old leader's token. The zombie of the old history and the new leader
// both present that token; memory, Verify and the backend (high-water equal
// to it) accept both: two holders of one term.
//
// The rewind is visible: the list has a key with a create revision at or
// below the revision the watch had applied that the watch never delivered
// (a key existing at revision N with create revision <= N must have been a
// candidate at N). Expected: the term is refused (no leader, Verify false).
func TestRedTeam17RestoredPastRevisionReissuesTerm(t *testing.T) {
	before, after := ownEtcd(t), ownEtcd(t)
	proxy, err := netfault.New(hostOf(before))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	oldEtcd, newEtcd := clientAt(t, before.ClientURL()), clientAt(t, after.ClientURL())

	const prefix = "/rt17reissue"
	old, err := oldEtcd.Put(t.Context(), prefix+"/jobs/old-leader", "old")
	if err != nil {
		t.Fatal(err)
	}
	term := old.Header.Revision
	// The restored history: another leader's key, created at the same
	// revision number.
	cur, err := newEtcd.Put(t.Context(), prefix+"/jobs/new-leader", "new")
	if err != nil {
		t.Fatal(err)
	}
	if cur.Header.Revision != term {
		t.Fatalf("setup: the new history's leader key got revision %d, want %d", cur.Header.Revision, term)
	}

	w := startWatcher(t, clientAt(t, "http://"+proxy.Addr()), WatcherConfig{Prefix: prefix})
	waitFor(t, "the old history's leader", func() bool { return w.Term("jobs").Leader == "old" })
	had := fillPast(t, oldEtcd, term+10)
	waitFor(t, "the watch at the old history's last revision", func() bool {
		w.mu.RLock()
		defer w.mu.RUnlock()
		return w.applied >= had
	})

	fillPast(t, newEtcd, had+5)
	proxy.Retarget(hostOf(after))
	proxy.Drop()
	proxy.Restore()

	awaitFollows(t, w, newEtcd, prefix)
	got := w.Term("jobs")
	_, held, err := w.Verify(t.Context(), "jobs", term)
	if err != nil {
		t.Fatal(err)
	}
	if (got.HasLeader() && got.Rev == term) || held {
		t.Fatalf("etcd restored (had reached %d, restored history past it); token %d was the old leader's and is "+
			"now another's: memory %+v, Verify held %v: current for both the zombie and the new leader", had, term, got, held)
	}
}

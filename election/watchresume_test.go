package election

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/election/netfault"
)

// TestWatchResumedOnRestoredEtcdListsAgain: etcd is restored from a backup
// without --bump-revision, and by the time fencegate's watch reconnects the
// restored etcd has passed the revision the watch had reached. clientv3
// would resume the watch there, on the new history, from the revision after
// the last it delivered: the old history's leader, whose key the new
// history does not have, would never be deleted from memory and would stay
// current for good, its zombie's writes admitted from memory. The Watcher
// takes no answer from a resumed stream: it lists again, and the new
// history is all it knows.
//
// The restore is a second etcd with a history of its own, behind the same
// address (a TCP proxy retargeted to it).
func TestWatchResumedOnRestoredEtcdListsAgain(t *testing.T) {
	before, after := ownEtcd(t), ownEtcd(t)
	proxy, err := netfault.New(hostOf(before))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	oldEtcd, newEtcd := clientAt(t, before.ClientURL()), clientAt(t, after.ClientURL())

	const prefix = "/resume"
	old, err := oldEtcd.Put(t.Context(), prefix+"/jobs/old", "old")
	if err != nil {
		t.Fatal(err)
	}
	w := startWatcher(t, clientAt(t, "http://"+proxy.Addr()), WatcherConfig{Prefix: prefix})
	waitFor(t, "the old history's leader", func() bool { return w.Term("jobs").Rev == old.Header.Revision })
	var had int64
	for range 10 {
		r, err := oldEtcd.Put(t.Context(), "/filler", "x")
		if err != nil {
			t.Fatal(err)
		}
		had = r.Header.Revision
	}
	waitFor(t, "the watch at the old history's last revision", func() bool {
		w.mu.RLock()
		defer w.mu.RUnlock()
		return w.applied >= had
	})

	// The restored etcd: no leader of jobs, and a revision past the old
	// one's.
	rev := fillPast(t, newEtcd, had+5)
	proxy.Retarget(hostOf(after))
	proxy.Drop()
	proxy.Restore()

	// The watch follows the new history again once it sees a new
	// election begin there.
	awaitFollows(t, w, newEtcd, prefix)
	if got := w.Term("jobs"); got.HasLeader() {
		t.Fatalf("etcd restored at revision %d (it had reached %d before) without jobs' leader key; the watch "+
			"resumed on it and still holds the old history's leader: %+v", rev, had, got)
	}
}

// TestWatchLostStreamUnsyncsAtOnce: when the watch's connection breaks,
// memory no longer follows etcd, and writes must be judged by reads of
// etcd (Fresh false) from then on, not only once a progress request goes
// unanswered. The check interval here is an hour, so only the stream's end
// can tell the Watcher.
func TestWatchLostStreamUnsyncsAtOnce(t *testing.T) {
	proxy, err := netfault.New(strings.TrimPrefix(endpoints()[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	w := startWatcher(t, clientAt(t, "http://"+proxy.Addr()), WatcherConfig{Prefix: testPrefix(t), CheckInterval: time.Hour})
	proxy.Drop()
	waitFor(t, "the watcher to say it no longer follows etcd", func() bool { return !w.Fresh("jobs") })
	proxy.Restore()
	waitFor(t, "the watcher to follow etcd again", w.Synced)
}

// TestWatchOnLaggingMemberIsNoRewind: the revision a watch's creation
// reports is its member's own, and a follower catching up reports one
// below what the Watcher applied from another member. That is no rewind
// of etcd: taken for one, every current term would be refused (floor) and
// no leader would ever campaign again to end it. The list's linearizable
// revision tells the two apart; on a lagging member the Watcher watches
// again. The lag is simulated (a single member cannot lag): the revision
// one creation reports is replaced by one below what was applied.
func TestWatchOnLaggingMemberIsNoRewind(t *testing.T) {
	proxy, err := netfault.New(strings.TrimPrefix(endpoints()[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	direct := newClient(t)
	prefix := testPrefix(t)
	cd := newCandidate(t, direct, prefix, "jobs")
	cd.campaign(t, "a")
	w, err := NewWatcher(clientAt(t, "http://"+proxy.Addr()), WatcherConfig{Prefix: prefix, CheckInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var lag, lagged atomic.Bool
	w.testHookWatchRev = func(rev int64) int64 {
		if !lag.CompareAndSwap(true, false) {
			return rev
		}
		w.mu.RLock()
		defer w.mu.RUnlock()
		lagged.Store(true)
		return max(w.applied-1, 1)
	}
	runWatcher(t, w)
	waitFor(t, "the leader", func() bool { return w.Synced() && w.Term("jobs").Rev == cd.e.Rev() })

	lag.Store(true)
	proxy.Drop()
	proxy.Restore()
	waitFor(t, "a watch on the lagging member", lagged.Load)
	waitFor(t, "synced again", w.Synced)
	if got := w.Term("jobs"); got.Rev != cd.e.Rev() || !got.HasLeader() {
		w.mu.RLock()
		floor := w.floor
		w.mu.RUnlock()
		t.Fatalf("after a watch on a member behind the cluster, jobs reads %+v (floor %d), want leader at %d: a lagging member taken for a rewind",
			got, floor, cd.e.Rev())
	}
}

package election

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Red-team tests (round 2) of the etcd term source: hostile etcd contents
// and faults. Each asserts the safe outcome.

// etcdLeaderRev is the term etcd's own concurrency.Election reports for
// election name under prefix: the create revision of the first-created
// key under "<prefix>/<name>/", 0 when none.
func etcdLeaderRev(t *testing.T, c *clientv3.Client, prefix, name string) int64 {
	t.Helper()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(30))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err := concurrency.NewElection(s, prefix+"/"+name).Leader(t.Context())
	if errors.Is(err, concurrency.ErrElectionNoLeader) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return resp.Kvs[0].CreateRevision
}

// waitApplied waits until the watcher has applied revision rev.
func waitApplied(t *testing.T, w *Watcher, rev int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("watch applied revision %d", rev), func() bool {
		w.mu.RLock()
		defer w.mu.RUnlock()
		return w.applied >= rev
	})
}

// Keys written under the prefix by something that is not a campaign: the
// watcher (both from its watch and from a fresh list) and Verify must name
// the same leader as etcd's own concurrency.Election, never a key etcd's
// election would not, and a token of one election must never be held in
// another whose name it shares a prefix with.
func TestRedTeam2HostileKeysAgreeWithEtcdElection(t *testing.T) {
	c := newClient(t)
	prefix := testPrefix(t)
	// Lease-less keys outlive the test: clear them before and after.
	clearKeys := func() {
		if _, err := c.Delete(context.WithoutCancel(t.Context()), prefix+"/", clientv3.WithPrefix()); err != nil {
			t.Error(err)
		}
	}
	clearKeys()
	t.Cleanup(clearKeys)
	w := startWatcher(t, c, WatcherConfig{Prefix: prefix})

	lease, err := c.Grant(t.Context(), 60)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Revoke(context.WithoutCancel(t.Context()), lease.ID) })
	put := func(key string, opts ...clientv3.OpOption) int64 {
		t.Helper()
		resp, err := c.Put(t.Context(), key, "hostile", opts...)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	// e1: a key equal to the election's prefix without its slash.
	put(prefix + "/e1")
	// e2: a key equal to the election's prefix, slash included.
	put(prefix + "/e2/")
	// e3: a key at a deeper path, with a lease.
	put(prefix+"/e3/x/y", clientv3.WithLease(lease.ID))
	// e4: nothing; e4-2 and e4x have real candidates.
	sib := newCandidate(t, c, prefix, "e4-2")
	sib.campaign(t, "sibling")
	sibx := newCandidate(t, c, prefix, "e4x")
	sibx.campaign(t, "siblingx")
	// e5: a plain put without lease before a real candidate.
	put(prefix + "/e5/manual")
	real5 := newCandidate(t, c, prefix, "e5")
	errc := real5.campaignAsync(t, c, "real")
	// e6: a real leader, then a deeper hostile key (created later: not
	// the leader).
	l6 := newCandidate(t, c, prefix, "e6")
	l6.campaign(t, "real6")
	last := put(prefix + "/e6/zzz/deeper")
	// the prefix root itself and a key right under it.
	put(prefix + "/")
	last = max(last, put(prefix+"/"+"/double"))

	waitApplied(t, w, last)
	fresh := startWatcher(t, c, WatcherConfig{Prefix: prefix})
	waitApplied(t, fresh, last)

	for _, name := range []string{"e1", "e2", "e3", "e4", "e4-2", "e4x", "e5", "e6"} {
		want := etcdLeaderRev(t, c, prefix, name)
		for wname, ww := range map[string]*Watcher{"watch": w, "list": fresh} {
			if got := ww.Term(name); got.Rev != want {
				t.Errorf("%s %s: watcher term %d (key %q), etcd's election says %d", wname, name, got.Rev, got.Key, want)
			}
		}
		// Verify from a watcher that has seen nothing.
		vw, err := NewWatcher(c, WatcherConfig{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range []int64{want, sib.e.Rev(), sibx.e.Rev(), last, last + 1} {
			if tok == 0 {
				continue
			}
			got, held, err := vw.Verify(t.Context(), name, tok)
			if err != nil {
				t.Fatal(err)
			}
			if held && got.HasLeader() && tok != want {
				t.Errorf("Verify(%s, %d): held as the current term, etcd's leader is %d", name, tok, want)
			}
			if held && !got.HasLeader() && want != 0 {
				t.Errorf("Verify(%s, %d): held as an ended term while etcd has leader %d", name, tok, want)
			}
			if tok == want && (!held || got.Rev != want) {
				t.Errorf("Verify(%s, %d) of etcd's leader: got held %v rev %d", name, tok, held, got.Rev)
			}
		}
	}
	select {
	case err := <-errc:
		t.Fatalf("e5's real candidate elected while the plain key exists: %v", err)
	default:
	}
}

// While the watcher sits between its list and its watch, terms come and
// go and Verify is asked meanwhile and folds its reads. Nothing is
// compacted: the watch then delivers every event. After it has, memory
// must show the current state and every term that ended must be known as
// ended (Last), as it is when no Verify came in between, so that its token
// is refused from memory (TERM_ENDED) rather than read from etcd again on
// every request (and, once compacted, called UNKNOWN_TERM).
func TestRedTeam2FoldSkipsEndedTerms(t *testing.T) {
	c := newClient(t)
	prefix := testPrefix(t)
	w, err := NewWatcher(c, WatcherConfig{Prefix: prefix, CheckInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	listed := make(chan int64)
	release := make(chan struct{})
	var once sync.Once
	w.testHookBeforeList = func(rev int64) {
		once.Do(func() {
			listed <- rev
			<-release
		})
	}
	runWatcher(t, w)
	<-listed

	a, b := newCandidate(t, c, prefix, "jobs"), newCandidate(t, c, prefix, "jobs")
	a.campaign(t, "worker-a")
	if _, held, err := w.Verify(t.Context(), "jobs", a.e.Rev()); err != nil || !held {
		t.Fatalf("Verify(a): held %v err %v", held, err)
	}
	errc := b.campaignAsync(t, c, "worker-b")
	a.resign(t)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// b's term is never asked about while the watch is behind.
	b.resign(t)
	// A forged token above everything: folds "no leader" at the current
	// revision, above b's whole term.
	if got, held, err := w.Verify(t.Context(), "jobs", 1<<40); err != nil || held || got.HasLeader() {
		t.Fatalf("Verify(forged): got %+v held %v err %v", got, held, err)
	}
	resp, err := c.Get(t.Context(), "now")
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	waitFor(t, "synced", w.Synced)
	waitApplied(t, w, resp.Header.Revision)
	got := w.Term("jobs")
	if got.HasLeader() {
		t.Fatalf("got leader %+v, want none", got)
	}
	// Safety: neither ended token may be Accept from memory.
	for _, tok := range []int64{a.e.Rev(), b.e.Rev()} {
		if got.HasLeader() && tok == got.Rev {
			t.Errorf("ended term %d is current in memory: %+v", tok, got)
		}
	}
	// Tracking: both ended terms are known ended (token <= Last).
	if got.Last < b.e.Rev() {
		t.Errorf("lost track of ended term %d although the watch delivered it: memory %+v has Last %d (a=%d b=%d)",
			b.e.Rev(), got, got.Last, a.e.Rev(), b.e.Rev())
	}
	// Still an ended term when read from etcd: held, or at or below Last
	// (either way tokens.DecideVerified says TERM_ENDED).
	if v, held, err := w.Verify(t.Context(), "jobs", b.e.Rev()); err != nil || v.HasLeader() || (!held && b.e.Rev() > v.Last) {
		t.Errorf("Verify(b=%d): got %+v held %v err %v, want an ended term", b.e.Rev(), v, held, err)
	}
}

// Candidates come and go while Verify is asked concurrently with the
// watch. Whatever Verify holds as a current term must have been etcd's
// leader at the revision Verify says it observed, and memory must never
// publish a leader that was not etcd's at its ObservedRev.
func TestRedTeam2VerifyRacesWatch(t *testing.T) {
	c := newClient(t)
	prefix := testPrefix(t)
	w := startWatcher(t, c, WatcherConfig{Prefix: prefix, CheckInterval: 50 * time.Millisecond})
	pfx := electionKeyPrefix(prefix, "jobs")

	type obs struct{ term Term }
	var (
		mu   sync.Mutex
		seen []obs
		revs []int64 // create revisions of every candidate key
		stop atomic.Bool
		wg   sync.WaitGroup
	)
	record := func(t Term) {
		mu.Lock()
		seen = append(seen, obs{t})
		mu.Unlock()
	}
	// Churn: three candidates with the Go campaign, resigning at random.
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load() && n < 15; n++ {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				l, err := Campaign(ctx, c, CampaignConfig{Prefix: prefix, Election: "jobs", Value: fmt.Sprint("w", i), TTL: 5 * time.Second})
				cancel()
				if err != nil {
					continue
				}
				mu.Lock()
				revs = append(revs, l.Token())
				mu.Unlock()
				time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
				_ = l.Resign(t.Context())
			}
		}()
	}
	// Verifiers.
	var vwg sync.WaitGroup
	for range 4 {
		vwg.Add(1)
		go func() {
			defer vwg.Done()
			for !stop.Load() {
				mu.Lock()
				var tok int64
				if len(revs) > 0 {
					tok = revs[rand.IntN(len(revs))] + int64(rand.IntN(3)) - 1
				}
				mu.Unlock()
				if tok <= 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				got, held, err := w.Verify(t.Context(), "jobs", tok)
				if err != nil {
					continue
				}
				if held && got.HasLeader() {
					if tok != got.Rev {
						t.Errorf("Verify(%d) held with leader %d", tok, got.Rev)
					}
					record(got)
				}
				record(w.Term("jobs"))
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	vwg.Wait()

	// Every published leader was etcd's leader at its ObservedRev.
	checked := 0
	for _, o := range seen {
		if !o.term.HasLeader() {
			continue
		}
		resp, err := c.Get(t.Context(), pfx, append(clientv3.WithFirstCreate(), clientv3.WithRev(o.term.ObservedRev))...)
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != o.term.Rev {
			t.Errorf("memory said leader %d (key %s) at revision %d; etcd had %v", o.term.Rev, o.term.Key, o.term.ObservedRev, resp.Kvs)
		}
		checked++
	}
	if checked == 0 {
		t.Fatalf("nothing checked (%d observations)", len(seen))
	}
	// Quiescent: memory equals etcd.
	resp, err := c.Get(t.Context(), "quiet")
	if err != nil {
		t.Fatal(err)
	}
	waitApplied(t, w, resp.Header.Revision)
	if got, want := w.Term("jobs").Rev, etcdLeaderRev(t, c, prefix, "jobs"); got != want {
		t.Errorf("after the churn: memory term %d, etcd %d", got, want)
	}
	mu.Lock()
	for _, r := range revs {
		if r > w.Term("jobs").Last {
			t.Errorf("term %d ended but Last is %d", r, w.Term("jobs").Last)
		}
	}
	mu.Unlock()
}

// The leader's key is deleted by someone else and re-created under the
// same name (same lease): a new create revision. The old token must no
// longer be the term, and the waiting candidate (created in between) is
// the leader; the Go Leadership must end.
func TestRedTeam2LeaderKeyRecreated(t *testing.T) {
	c := newClient(t)
	prefix := testPrefix(t)
	w := startWatcher(t, c, WatcherConfig{Prefix: prefix})
	l, err := Campaign(t.Context(), c, CampaignConfig{Prefix: prefix, Election: "jobs", Value: "a", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Resign(context.WithoutCancel(t.Context())) })
	b := newCandidate(t, c, prefix, "jobs")
	errc := b.campaignAsync(t, c, "b")
	old := l.Token()
	waitFor(t, "leader a", func() bool { return w.Term("jobs").Rev == old })

	if _, err := c.Delete(t.Context(), l.Key()); err != nil {
		t.Fatal(err)
	}
	pr, err := c.Put(t.Context(), l.Key(), "a", clientv3.WithLease(l.Lease()))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("b campaign: %v", err)
	}
	waitApplied(t, w, pr.Header.Revision)
	got := w.Term("jobs")
	if got.Rev != b.e.Rev() {
		t.Errorf("after a's key was re-created: memory term %d (key %s), want b's %d", got.Rev, got.Key, b.e.Rev())
	}
	for _, tok := range []int64{old, pr.Header.Revision} {
		if _, held, err := w.Verify(t.Context(), "jobs", tok); err != nil || held {
			t.Errorf("Verify(%d): held %v err %v, want not held", tok, held, err)
		}
	}
	select {
	case <-l.Done():
		if !errors.Is(l.Err(), ErrKeyDeleted) {
			t.Errorf("leadership ended with %v, want ErrKeyDeleted", l.Err())
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the Go leadership did not end after its key was deleted and re-created")
	}
}

// etcd stops and starts again; right after, the leader resigns and another
// is elected. The watcher must follow, and Verify must refuse the old
// term.
func TestRedTeam2EtcdRestartThenHandover(t *testing.T) {
	c := newClient(t)
	prefix := testPrefix(t)
	w := startWatcher(t, c, WatcherConfig{Prefix: prefix})
	a, b := newCandidate(t, c, prefix, "jobs"), newCandidate(t, c, prefix, "jobs")
	a.campaign(t, "a")
	errc := b.campaignAsync(t, c, "b")
	waitFor(t, "leader a", func() bool { return w.Term("jobs").Rev == a.e.Rev() })
	stopEtcd(t)
	waitFor(t, "watch lost", func() bool { return !w.Synced() })
	startEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for {
		if err := a.e.Resign(ctx); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatalf("resign: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := <-errc; err != nil {
		t.Fatalf("b campaign: %v", err)
	}
	waitFor(t, "leader b", func() bool { return w.Term("jobs").Rev == b.e.Rev() })
	if _, held, err := w.Verify(t.Context(), "jobs", a.e.Rev()); err != nil || held {
		t.Errorf("Verify(a): held %v err %v", held, err)
	}
}

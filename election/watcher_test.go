package election

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaderRev returns a candidate's term as etcd has it.
func leaderRev(t *testing.T, cd *etcdCandidate) int64 {
	t.Helper()
	return cd.e.Rev()
}

func TestWatcherTerms(t *testing.T) {
	c := newClient(t)
	tests := []struct {
		name string
		run  func(t *testing.T, prefix string, w *Watcher)
	}{
		{"leader reported", func(t *testing.T, prefix string, w *Watcher) {
			t.Helper()
			a := newCandidate(t, c, prefix, "jobs")
			a.campaign(t, "worker-a")
			waitFor(t, "leader a", func() bool { return w.Term("jobs").Rev == leaderRev(t, a) })
			got := w.Term("jobs")
			want := Term{Election: "jobs", Rev: a.e.Rev(), Leader: "worker-a", Key: a.key, Last: a.e.Rev(), Changes: 1, ObservedRev: got.ObservedRev}
			if got != want {
				t.Errorf("got %+v, want %+v", got, want)
			}
			if got.ObservedRev < got.Rev {
				t.Errorf("got ObservedRev %d, want >= %d", got.ObservedRev, got.Rev)
			}
		}},
		{"resign hands over", func(t *testing.T, prefix string, w *Watcher) {
			t.Helper()
			a, b := newCandidate(t, c, prefix, "jobs"), newCandidate(t, c, prefix, "jobs")
			a.campaign(t, "worker-a")
			errc := b.campaignAsync(t, c, "worker-b")
			waitFor(t, "leader a", func() bool { return w.Term("jobs").Rev == a.e.Rev() })
			first := w.Term("jobs")
			a.resign(t)
			if err := <-errc; err != nil {
				t.Fatalf("b campaign: %v", err)
			}
			waitFor(t, "leader b", func() bool { return w.Term("jobs").Rev == b.e.Rev() })
			got := w.Term("jobs")
			if got.Leader != "worker-b" || got.Key != b.key {
				t.Errorf("got leader %q key %q, want worker-b %q", got.Leader, got.Key, b.key)
			}
			if got.Last != b.e.Rev() || got.Last <= first.Last {
				t.Errorf("got Last %d, want %d (above %d)", got.Last, b.e.Rev(), first.Last)
			}
			if got.Changes != first.Changes+1 {
				t.Errorf("got Changes %d, want %d", got.Changes, first.Changes+1)
			}
		}},
		{"revoked lease ends term", func(t *testing.T, prefix string, w *Watcher) {
			t.Helper()
			a := newCandidate(t, c, prefix, "jobs")
			a.campaign(t, "worker-a")
			rev := a.e.Rev()
			waitFor(t, "leader a", func() bool { return w.Term("jobs").Rev == rev })
			if _, err := newClient(t).Revoke(t.Context(), a.s.Lease()); err != nil {
				t.Fatalf("revoke: %v", err)
			}
			waitFor(t, "term end", func() bool { return !w.Term("jobs").HasLeader() })
			got := w.Term("jobs")
			want := Term{Election: "jobs", Last: rev, Changes: 2, ObservedRev: got.ObservedRev}
			if got != want {
				t.Errorf("got %+v, want %+v", got, want)
			}
		}},
		{"several elections", func(t *testing.T, prefix string, w *Watcher) {
			t.Helper()
			names := []string{"c", "a", "b"}
			want := map[string]int64{}
			for _, n := range names {
				cd := newCandidate(t, c, prefix, n)
				cd.campaign(t, "worker-"+n)
				want[n] = cd.e.Rev()
			}
			waitFor(t, "three leaders", func() bool {
				for n, rev := range want {
					if w.Term(n).Rev != rev {
						return false
					}
				}
				return true
			})
			var got []string
			for _, tm := range w.Terms() {
				got = append(got, tm.Election)
				if tm.Leader != "worker-"+tm.Election {
					t.Errorf("election %s: got leader %q, want %q", tm.Election, tm.Leader, "worker-"+tm.Election)
				}
			}
			if !slices.Equal(got, []string{"a", "b", "c"}) {
				t.Errorf("got elections %v, want [a b c]", got)
			}
		}},
		{"keys outside the layout ignored", func(t *testing.T, prefix string, w *Watcher) {
			t.Helper()
			for _, k := range []string{prefix, prefix + "/", prefix + "/flat", prefix + "//x", prefix + "x/y/z"} {
				if _, err := c.Put(t.Context(), k, "v"); err != nil {
					t.Fatalf("put %s: %v", k, err)
				}
			}
			a := newCandidate(t, c, prefix, "jobs")
			a.campaign(t, "worker-a")
			waitFor(t, "leader a", func() bool { return w.Term("jobs").Rev == a.e.Rev() })
			var got []string
			for _, tm := range w.Terms() {
				got = append(got, tm.Election)
			}
			if !slices.Equal(got, []string{"jobs"}) {
				t.Errorf("got elections %v, want [jobs]", got)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := testPrefix(t)
			w := startWatcher(t, c, WatcherConfig{Prefix: prefix})
			tt.run(t, prefix, w)
		})
	}
}

func TestWatcherListsExistingState(t *testing.T) {
	c := newClient(t)
	prefix := testPrefix(t)
	a, b := newCandidate(t, c, prefix, "jobs"), newCandidate(t, c, prefix, "jobs")
	a.campaign(t, "worker-a")
	b.campaignAsync(t, c, "worker-b")
	w := startWatcher(t, c, WatcherConfig{Prefix: prefix})
	if got, want := w.Term("jobs").Rev, a.e.Rev(); got != want {
		t.Errorf("got Rev %d after list, want %d", got, want)
	}
	a.resign(t)
	waitFor(t, "leader b", func() bool { return w.Term("jobs").Leader == "worker-b" })
}

func TestWatcherSurvivesEtcdRestart(t *testing.T) {
	c := newClient(t)
	prefix := testPrefix(t)
	w := startWatcher(t, c, WatcherConfig{Prefix: prefix})
	a := newCandidate(t, c, prefix, "jobs")
	a.campaign(t, "worker-a")
	waitFor(t, "leader a", func() bool { return w.Term("jobs").Rev == a.e.Rev() })
	lists := w.lists.Load()

	stopEtcd(t)
	waitFor(t, "Synced false while etcd is down", func() bool { return !w.Synced() })
	startEtcd(t)
	waitFor(t, "Synced true after restart", w.Synced)
	if got := w.lists.Load(); got <= lists {
		t.Errorf("got %d lists, want more than %d", got, lists)
	}
	if got := w.Term("jobs").Rev; got != a.e.Rev() {
		t.Errorf("got Rev %d after restart, want %d", got, a.e.Rev())
	}

	b := newCandidate(t, c, prefix, "jobs")
	errc := b.campaignAsync(t, c, "worker-b")
	a.resign(t)
	if err := <-errc; err != nil {
		t.Fatalf("b campaign: %v", err)
	}
	waitFor(t, "leader b after restart", func() bool { return w.Term("jobs").Rev == b.e.Rev() })
}

func TestWatcherRelistsAfterCompaction(t *testing.T) {
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
	listRev := <-listed

	// While the watcher sits between its watch and its list, elect a, hand
	// over to b and compact the history past the watch's revision.
	a, b := newCandidate(t, c, prefix, "jobs"), newCandidate(t, c, prefix, "jobs")
	a.campaign(t, "worker-a")
	errc := b.campaignAsync(t, c, "worker-b")
	a.resign(t)
	if err := <-errc; err != nil {
		t.Fatalf("b campaign: %v", err)
	}
	resp, err := c.Get(t.Context(), "compact-me")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(t.Context(), resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact: %v", err)
	}
	if resp.Header.Revision <= listRev+1 {
		t.Fatalf("compacted at %d, want above %d", resp.Header.Revision, listRev+1)
	}
	close(release)

	// The list at the watch's revision, compacted meanwhile, fails; the
	// session starts again with a watch and a list of today's revision.
	waitFor(t, "leader b after re-list", func() bool { return w.Term("jobs").Rev == b.e.Rev() && w.Synced() })
	if got := w.lists.Load(); got != 1 {
		t.Errorf("got %d lists, want 1 (the first, compacted, failed)", got)
	}
	got := w.Term("jobs")
	want := Term{Election: "jobs", Rev: b.e.Rev(), Leader: "worker-b", Key: b.key, Last: b.e.Rev(), Changes: 1, ObservedRev: got.ObservedRev}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestVerify(t *testing.T) {
	c := newClient(t)
	tests := []struct {
		name string
		// setup elects or ends terms and returns the token to verify and
		// the leader expected.
		setup      func(t *testing.T, prefix string) (token, wantRev int64)
		wantHeld   bool
		wantLast   func(token int64) int64
		wantStored bool // the term is in the watcher's memory afterwards
	}{
		{
			name: "new leader not delivered yet",
			setup: func(t *testing.T, prefix string) (int64, int64) {
				t.Helper()
				a := newCandidate(t, c, prefix, "jobs")
				a.campaign(t, "worker-a")
				return a.e.Rev(), a.e.Rev()
			},
			wantHeld: true, wantLast: func(tok int64) int64 { return tok }, wantStored: true,
		},
		{
			name: "token below the current leader",
			setup: func(t *testing.T, prefix string) (int64, int64) {
				t.Helper()
				a := newCandidate(t, c, prefix, "jobs")
				a.campaign(t, "worker-a")
				return a.e.Rev() - 1, a.e.Rev()
			},
			wantHeld: false, wantLast: func(tok int64) int64 { return tok + 1 }, wantStored: true,
		},
		{
			name: "forged token above the current revision",
			setup: func(t *testing.T, prefix string) (int64, int64) {
				t.Helper()
				a := newCandidate(t, c, prefix, "jobs")
				a.campaign(t, "worker-a")
				a.resign(t)
				return a.e.Rev() + 1_000_000, 0
			},
			wantHeld: false, wantLast: func(int64) int64 { return 0 },
		},
		{
			name: "ended term above Last",
			setup: func(t *testing.T, prefix string) (int64, int64) {
				t.Helper()
				a := newCandidate(t, c, prefix, "jobs")
				a.campaign(t, "worker-a")
				rev := a.e.Rev()
				a.resign(t)
				return rev, 0
			},
			wantHeld: true, wantLast: func(int64) int64 { return 0 },
		},
		{
			name: "revision that created no key of the election",
			setup: func(t *testing.T, prefix string) (int64, int64) {
				t.Helper()
				resp, err := c.Put(t.Context(), prefix+"-elsewhere", "x")
				if err != nil {
					t.Fatal(err)
				}
				return resp.Header.Revision, 0
			},
			wantHeld: false, wantLast: func(int64) int64 { return 0 },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := testPrefix(t)
			// Run is never started: only Verify feeds the watcher.
			w, err := NewWatcher(c, WatcherConfig{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			token, wantRev := tt.setup(t, prefix)
			got, held, err := w.Verify(t.Context(), "jobs", token)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if held != tt.wantHeld {
				t.Errorf("got held %v, want %v", held, tt.wantHeld)
			}
			if got.Rev != wantRev {
				t.Errorf("got Rev %d, want %d", got.Rev, wantRev)
			}
			if want := tt.wantLast(token); got.Last != want {
				t.Errorf("got Last %d, want %d", got.Last, want)
			}
			if stored := w.Term("jobs"); stored != got && tt.wantStored {
				t.Errorf("got stored term %+v, want %+v", stored, got)
			}
		})
	}
}

func TestVerifyErrors(t *testing.T) {
	c := newClient(t)
	w, err := NewWatcher(c, WatcherConfig{Prefix: testPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := w.Verify(ctx, "jobs", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Verify with a cancelled context: got %v, want context.Canceled", err)
	}
	if _, held, err := w.Verify(t.Context(), "a/b", 1); held || err != nil {
		t.Errorf("Verify of an invalid name: got held %v, err %v, want false, nil", held, err)
	}
}

// TestFoldNeverGoesBack feeds the watcher's state answers out of order.
func TestFoldNeverGoesBack(t *testing.T) {
	w, err := NewWatcher(&clientv3.Client{}, WatcherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	answer := func(rev int64, leaderRev int64) *clientv3.GetResponse {
		r := &clientv3.GetResponse{Header: &etcdserverpb.ResponseHeader{Revision: rev}}
		if leaderRev != 0 {
			r.Kvs = []*mvccpb.KeyValue{{Key: []byte("k"), CreateRevision: leaderRev}}
		}
		return r
	}
	steps := []struct {
		rev, leader     int64
		wantRev, wantOb int64
	}{
		{rev: 10, leader: 7, wantRev: 7, wantOb: 10},
		{rev: 9, leader: 0, wantRev: 7, wantOb: 10},  // older: ignored
		{rev: 10, leader: 0, wantRev: 7, wantOb: 10}, // same: ignored
		{rev: 12, leader: 0, wantRev: 0, wantOb: 12},
		{rev: 11, leader: 7, wantRev: 0, wantOb: 12},
	}
	for i, s := range steps {
		got := w.fold("jobs", answer(s.rev, s.leader))
		if got.Rev != s.wantRev || got.ObservedRev != s.wantOb || got.Last != 7 {
			t.Errorf("step %d: got Rev %d ObservedRev %d Last %d, want %d %d 7", i, got.Rev, got.ObservedRev, got.Last, s.wantRev, s.wantOb)
		}
	}
}

func TestWatcherConfig(t *testing.T) {
	tests := []struct {
		prefix  string
		wantErr bool
	}{
		{"", false}, {"/x", false}, {"/x/", true}, {"/", true},
	}
	for _, tt := range tests {
		_, err := NewWatcher(&clientv3.Client{}, WatcherConfig{Prefix: tt.prefix})
		if (err != nil) != tt.wantErr {
			t.Errorf("prefix %q: got err %v, want error %v", tt.prefix, err, tt.wantErr)
		}
	}
}

func TestTermAllocs(t *testing.T) {
	w, err := NewWatcher(&clientv3.Client{}, WatcherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	w.terms["jobs"] = Term{Election: "jobs", Rev: 5, Last: 5}
	name := "jobs"
	if n := testing.AllocsPerRun(100, func() { _ = w.Term(name) }); n != 0 {
		t.Errorf("got %v allocations per Term, want 0", n)
	}
}

// TestTermChangeLatency measures how long a leader change takes from the
// old leader's Resign returning to the new term reaching OnChange.
func TestTermChangeLatency(t *testing.T) {
	const samples = 60
	c := newClient(t)
	prefix := testPrefix(t)
	type seen struct {
		t  Term
		at time.Time
	}
	changes := make(chan seen, 4*samples)
	startWatcher(t, c, WatcherConfig{Prefix: prefix, OnChange: func(_, nw Term) {
		changes <- seen{nw, time.Now()}
	}})

	cur := newCandidate(t, c, prefix, "lat")
	cur.campaign(t, "w")
	// fromCall includes Resign's round trip; fromReturn can be negative
	// when the watch event beats Resign's answer.
	var fromCall, fromReturn []time.Duration
	for range samples {
		next := newCandidate(t, c, prefix, "lat")
		errc := next.campaignAsync(t, c, "w")
		called := time.Now()
		cur.resign(t)
		returned := time.Now()
		timeout := time.NewTimer(5 * time.Second)
		for got := false; !got; {
			select {
			case s := <-changes:
				if s.t.Key == next.key {
					fromCall = append(fromCall, s.at.Sub(called))
					fromReturn = append(fromReturn, s.at.Sub(returned))
					got = true
				}
			case <-timeout.C:
				t.Fatalf("no term change within 5s after Resign")
			}
		}
		timeout.Stop()
		if err := <-errc; err != nil {
			t.Fatalf("campaign: %v", err)
		}
		cur.s.Close()
		cur = next
	}
	for _, d := range []struct {
		name string
		lat  []time.Duration
	}{{"Resign called", fromCall}, {"Resign returned", fromReturn}} {
		lat := d.lat
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		t.Logf("term change latency, %s -> OnChange of the new leader: n=%d p50=%v p99=%v max=%v",
			d.name, len(lat), lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
	}
}

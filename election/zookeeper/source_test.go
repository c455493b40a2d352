package zookeeper_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencegate/fencegate/election"
	"github.com/fencegate/fencegate/election/zookeeper"
)

func TestLeader(t *testing.T) {
	for _, tc := range []struct {
		name     string
		children []string
		want     string
	}{
		{"none", nil, ""},
		{"curator latch", []string{"_c_9f1-latch-0000000009", "_c_2ab-latch-0000000007"}, "_c_2ab-latch-0000000007"},
		{"kazoo election", []string{"b1__lock__0000000012", "a9__lock__0000000011"}, "a9__lock__0000000011"},
		{"plain latch", []string{"latch-0000000003", "latch-0000000002"}, "latch-0000000002"},
		{"styles mixed, one counter", []string{"latch-0000000005", "x__lock__0000000004", "_c_1-latch-0000000006"}, "x__lock__0000000004"},
		{"others ignored", []string{"config", "latch-000000001", "lock-abcdefghij", "latch-0000000008"}, "latch-0000000008"},
		{"no candidate", []string{"config", "owner"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := zookeeper.Leader(tc.children)
			if got != tc.want || ok != (tc.want != "") {
				t.Fatalf("got %q %v, want %q", got, ok, tc.want)
			}
		})
	}
}

// startSource runs a Source of the elections under root until the test
// ends.
func startSource(t *testing.T, root string, changes func(prev, next election.Term)) *zookeeper.Source {
	t.Helper()
	s, err := zookeeper.New(zookeeper.Config{Servers: []string{zkAddr}, Root: root, SessionTimeout: 2 * time.Second, OnChange: changes})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); s.Close() })
	waitFor(t, "session", s.Connected)
	return s
}

// connect opens a ZooKeeper session of its own, as a worker has.
func connect(t *testing.T) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{zkAddr}, 2*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	waitFor(t, "worker session", func() bool { return c.State() == zk.StateHasSession })
	return c
}

// mkdirs creates path and its parents.
func mkdirs(t *testing.T, c *zk.Conn, path string) {
	t.Helper()
	p := ""
	for _, part := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		p += "/" + part
		if _, err := c.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %v", p, err)
		}
	}
}

// candidate creates an ephemeral sequential candidate <election>/<prefix>NNNNNNNNNN
// holding value, and returns its path and czxid.
func candidate(t *testing.T, c *zk.Conn, election, prefix, value string) (string, int64) {
	t.Helper()
	path, err := c.Create(election+"/"+prefix, []byte(value), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatalf("create candidate: %v", err)
	}
	_, st, err := c.Exists(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, st.Czxid
}

func testRoot(t *testing.T) string {
	t.Helper()
	return "/t/" + strings.NewReplacer("/", "_").Replace(t.Name())
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitTerm(t *testing.T, s *zookeeper.Source, name string, rev, last int64) election.Term {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := s.Term(name)
		if got.Rev == rev && got.Last == last {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("term of %s: got Rev %d Last %d, want Rev %d Last %d", name, got.Rev, got.Last, rev, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFollowsElection: the leader is the lowest sequence whatever the
// naming style, its czxid the term; the watch follows leader changes, and a
// deleted leader node ends its term (no leader, Last kept).
func TestFollowsElection(t *testing.T) {
	root := testRoot(t)
	var mu sync.Mutex
	var seen []int64
	s := startSource(t, root, func(_, n election.Term) { mu.Lock(); seen = append(seen, n.Rev); mu.Unlock() })
	w1, w2, w3 := connect(t), connect(t), connect(t)
	el := root + "/orders"
	mkdirs(t, w1, el)

	p1, z1 := candidate(t, w1, el, "_c_7d3c-latch-", "curator")
	p2, z2 := candidate(t, w2, el, "4e1f__lock__", "kazoo")
	_, z3 := candidate(t, w3, el, "latch-", "plain")

	term, held, err := s.Verify(t.Context(), "orders", z1)
	if err != nil || !held {
		t.Fatalf("verify leader's token %d: got held %v (%v), want true", z1, held, err)
	}
	if term.Rev != z1 || term.Leader != "curator" || term.Key != p1 {
		t.Fatalf("got term %+v, want Rev %d Leader curator Key %s", term, z1, p1)
	}
	for _, tok := range []int64{z2, z3, z3 + 1000} {
		if _, held, err := s.Verify(t.Context(), "orders", tok); err != nil || held {
			t.Fatalf("verify non-leader token %d: got held %v (%v), want false", tok, held, err)
		}
	}

	if err := w1.Delete(p1, -1); err != nil {
		t.Fatal(err)
	}
	got := waitTerm(t, s, "orders", z2, z2)
	if got.Leader != "kazoo" || got.Key != p2 {
		t.Fatalf("after the leader resigned: got %+v, want kazoo's %s", got, p2)
	}
	w2.Close() // its session ends: the ephemeral node goes
	waitTerm(t, s, "orders", z3, z3)
	w3.Close()
	got = waitTerm(t, s, "orders", 0, z3)
	if got.HasLeader() || got.Leader != "" || got.Key != "" {
		t.Fatalf("no candidate left: got %+v, want no leader", got)
	}
	if _, held, err := s.Verify(t.Context(), "orders", z3); err != nil || held {
		t.Fatalf("verify ended term %d: got held %v (%v), want false", z3, held, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int64{z1, z2, z3, 0}; !equal(seen, want) {
		t.Fatalf("OnChange: got terms %v, want %v", seen, want)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestVerifyBeforeWatch: a leader elected after the election is watched is
// verified at once by a synced read, whatever the watch has delivered, and
// an election that does not exist yet is watched from its creation.
func TestVerifyBeforeWatch(t *testing.T) {
	root := testRoot(t)
	s := startSource(t, root, nil)
	w := connect(t)
	if term, held, err := s.Verify(t.Context(), "late", 5); err != nil || held || term.HasLeader() {
		t.Fatalf("verify in a missing election: got %+v held %v (%v), want no leader, not held", term, held, err)
	}
	el := root + "/late"
	mkdirs(t, w, el)
	_, z := candidate(t, w, el, "latch-", "w")
	if term, held, err := s.Verify(t.Context(), "late", z); err != nil || !held || term.Rev != z {
		t.Fatalf("verify a leader elected just now: got %+v held %v (%v), want Rev %d held", term, held, err, z)
	}
	// The watch, from the election's creation on, follows it too.
	w.Close()
	waitTerm(t, s, "late", 0, z)

	w2 := connect(t)
	_, z2 := candidate(t, w2, el, "latch-", "w2")
	waitTerm(t, s, "late", z2, z2)
	if z2 <= z {
		t.Fatalf("got term %d after %d, want terms to increase", z2, z)
	}
}

// TestVerifyUnavailable: a ZooKeeper that cannot answer is an error within
// the caller's deadline, not a refusal.
func TestVerifyUnavailable(t *testing.T) {
	s, err := zookeeper.New(zookeeper.Config{Servers: []string{"127.0.0.1:1"}, SessionTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err = s.Verify(ctx, "x", 5)
	if err == nil || !strings.HasPrefix(err.Error(), `zookeeper: verify "x": `) {
		t.Fatalf("got %v, want zookeeper: verify \"x\": ...", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("verify took %v, want about the deadline", d)
	}
	if s.Connected() {
		t.Fatal("got Connected true with no server, want false")
	}
}

func TestNewConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  zookeeper.Config
		want string
	}{
		{zookeeper.Config{}, "zookeeper: no servers"},
		{zookeeper.Config{Servers: []string{zkAddr}, Root: "elections"}, `zookeeper: election root "elections"`},
		{zookeeper.Config{Servers: []string{zkAddr}, Root: "/e/"}, `zookeeper: election root "/e/"`},
		{zookeeper.Config{Servers: []string{zkAddr}, SessionTimeout: -1}, "zookeeper: negative session timeout"},
	} {
		s, err := zookeeper.New(tc.cfg)
		if err == nil {
			s.Close()
			t.Fatalf("New(%+v): got no error, want %q", tc.cfg, tc.want)
		}
		if !strings.HasPrefix(err.Error(), tc.want) {
			t.Fatalf("New(%+v): got %q, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestTermAllocs: Term, on every write, does not allocate.
func TestTermAllocs(t *testing.T) {
	s := startSource(t, testRoot(t), nil)
	if n := testing.AllocsPerRun(100, func() { _ = s.Term("orders") }); n != 0 {
		t.Fatalf("got %v allocations per Term, want 0", n)
	}
}

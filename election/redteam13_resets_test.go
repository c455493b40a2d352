package election

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/election/netfault"
)

// newProxy is a netfault proxy to target, closed when the test ends. Its
// Drop is this replica cut off from etcd, the others not: every
// connection closed, new ones closed at once, until Restore.
func newProxy(t *testing.T, target string) *netfault.Proxy {
	t.Helper()
	p, err := netfault.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestRedTeam13ResetLostToCompaction: a replica's reset watch is cut off
// from etcd (a partition, an etcd member restart) while another replica
// resets fence f2, and etcd compacts its history meanwhile (periodic
// auto-compaction). On reconnecting, the watch resumes at the revision
// after the last one it received, is told it was compacted, and
// Resets.watch restarts it at the compaction revision: the reset of f2, in
// between, is never delivered, and this replica goes on refusing f2's
// leader from its poisoned memory (STALE_TOKEN, no backend round trip)
// until it restarts. Resets are durable keys: a compacted watch can list
// them.
func TestRedTeam13ResetLostToCompaction(t *testing.T) {
	proxy := newProxy(t, strings.TrimPrefix(endpoints()[0], "http://"))
	viaProxy, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://" + proxy.Addr()},
		DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { viaProxy.Close() })
	direct := newClient(t)
	prefix := testPrefix(t) + "/resets/"

	var mu sync.Mutex
	lowered := map[string]int64{}
	mine := NewResets(viaProxy, prefix, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done, err := mine.Start(ctx, func(fence string, mark int64) {
		mu.Lock()
		lowered[fence] = mark
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })
	got := func(fence string) (int64, bool) {
		mu.Lock()
		defer mu.Unlock()
		m, ok := lowered[fence]
		return m, ok
	}
	other := NewResets(direct, prefix, nil)

	// The watch works.
	if err := other.PublishReset(t.Context(), "f1", 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reset of f1 delivered", func() bool { _, ok := got("f1"); return ok })

	// Cut off; f2 is reset meanwhile, and etcd compacts.
	proxy.Drop()
	if err := other.PublishReset(t.Context(), "f2", 2); err != nil {
		t.Fatal(err)
	}
	resp, err := direct.Put(t.Context(), testPrefix(t)+"/filler", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Compact(t.Context(), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()

	// A reset published after the reconnection is delivered: the watch
	// is back.
	deadline := time.Now().Add(20 * time.Second)
	for i := int64(3); ; i++ {
		if err := other.PublishReset(t.Context(), "f3", i); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if _, ok := got("f3"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reset watch never came back after the cut")
		}
	}
	if m, ok := got("f2"); !ok {
		t.Fatalf("fence f2 was reset (mark 2) while this replica was cut off and etcd compacted; after the watch "+
			"came back (it delivered f3's later reset) f2's reset was never delivered: lowered %v", snapshot(&mu, lowered))
	} else if m != 2 {
		t.Fatalf("f2 lowered to %d, want 2", m)
	}
}

func snapshot(mu *sync.Mutex, m map[string]int64) map[string]int64 {
	mu.Lock()
	defer mu.Unlock()
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

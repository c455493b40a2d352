package election

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/election/freeport"
)

// startCluster24 starts a real three-member embedded etcd cluster (the
// package harness runs one member only; a partition needs three), with
// etcd's election timeout electionMs. Members are closed when the test ends.
func startCluster24(t *testing.T, electionMs uint) []*embed.Etcd {
	t.Helper()
	const n = 3
	type addrs struct{ client, peer url.URL }
	as := make([]addrs, n)
	var initial []string
	for i := range as {
		c, _ := url.Parse("http://" + freeport.Addr(t))
		p, _ := url.Parse("http://" + freeport.Addr(t))
		as[i] = addrs{*c, *p}
		initial = append(initial, fmt.Sprintf("m%d=%s", i, p))
	}
	es := make([]*embed.Etcd, n)
	for i := range es {
		ec := embed.NewConfig()
		ec.Name = fmt.Sprintf("m%d", i)
		ec.Dir = t.TempDir()
		ec.ListenClientUrls = []url.URL{as[i].client}
		ec.AdvertiseClientUrls = []url.URL{as[i].client}
		ec.ListenPeerUrls = []url.URL{as[i].peer}
		ec.AdvertisePeerUrls = []url.URL{as[i].peer}
		ec.InitialCluster = strings.Join(initial, ",")
		ec.InitialClusterToken = "redteam24"
		ec.UnsafeNoFsync = true
		ec.ElectionMs = electionMs
		ec.TickMs = electionMs / 10
		ec.LogLevel = "error"
		ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		e, err := embed.StartEtcd(ec)
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		es[i] = e
		t.Cleanup(e.Close)
	}
	for i, e := range es {
		select {
		case <-e.Server.ReadyNotify():
		case <-time.After(20 * time.Second):
			t.Fatalf("member %d not ready", i)
		}
	}
	return es
}

// TestRedTeam24PartitionedMemberKeepsWatchFresh: the Watcher's liveness
// check is a progress request answered within an interval (CheckInterval);
// an answer keeps the session, and Synced/Fresh, true. But a member answers
// progress requests from its own store (etcd's watch server calls
// RequestProgressAll with no leader or quorum check), so an etcd member cut
// off from the rest of the cluster goes on answering them, with its own,
// frozen revision: the watch is not "silent", it is stale. Only etcd's
// require-leader monitor ends the stream, once the member has gone without
// a leader for maxNoLeaderCnt (3) election timeouts after losing it, i.e.
// 4 to 5 election timeouts after the partition; that depends on etcd's
// --election-timeout (often raised to several seconds across zones), not
// on fencegate's CheckInterval.
//
// Attack/fault: fencegate's client is connected to member m (a follower);
// m is partitioned from the two others. On the majority the leader of
// "jobs" resigns (its key is deleted) and a new leader takes over. For
// seconds afterwards the Watcher stays Synced, Fresh("jobs") true, with the
// ended term current in memory: the gateway decides from memory
// (tokens.Decide = Accept) and admits the old leader's (the zombie's)
// writes without reading etcd, as long as the new leader has not written
// yet. The test uses election timeout 3 s and CheckInterval 200 ms and
// looks 2 s after the takeover (10 check intervals).
//
// Expected: freshness must be proven against the cluster, not the member
// (e.g. a linearizable read, or a WithRequireLeader/quorum-checked request
// such as a count-only Get, per check, its revision compared with what
// the watch has applied; a progress answer below a linearizable read's
// revision means the watch is behind): within a couple of CheckIntervals
// of the partition Fresh must turn false, so writes are judged by Verify
// (which then fails with ETCD_UNAVAILABLE or sees the new leader).
// Severity: high — a zombie's writes are admitted for a window set by
// etcd's election timeout, while the design promises the watch is declared
// lost within two CheckIntervals.
func TestRedTeam24PartitionedMemberKeepsWatchFresh(t *testing.T) {
	const electionMs = 3000
	es := startCluster24(t, electionMs)
	// Pick a follower to be fencegate's member.
	var lead uint64
	waitFor(t, "an etcd leader", func() bool {
		lead = uint64(es[0].Server.Leader())
		return lead != 0
	})
	var stale *embed.Etcd
	var majority []*embed.Etcd
	for _, e := range es {
		if uint64(e.Server.MemberID()) != lead && stale == nil {
			stale = e
		} else {
			majority = append(majority, e)
		}
	}
	cli := func(e *embed.Etcd) *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Clients[0].Addr().String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	wcli := cli(stale)
	mcli := cli(majority[0])

	prefix := testPrefix(t)
	ctx := t.Context()
	leaseOld, err := mcli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	put, err := mcli.Put(ctx, fmt.Sprintf("%s/jobs/%x", prefix, leaseOld.ID), "old", clientv3.WithLease(leaseOld.ID))
	if err != nil {
		t.Fatal(err)
	}
	zombie := put.Header.Revision

	w := startWatcher(t, wcli, WatcherConfig{Prefix: prefix, CheckInterval: 200 * time.Millisecond})
	waitFor(t, "watcher sees the old leader", func() bool { return w.Term("jobs").Rev == zombie })

	// Partition the stale member from the others, both ways.
	for _, o := range majority {
		stale.Server.CutPeer(o.Server.MemberID())
		o.Server.CutPeer(stale.Server.MemberID())
	}
	t.Cleanup(func() {
		for _, o := range majority {
			stale.Server.MendPeer(o.Server.MemberID())
			o.Server.MendPeer(stale.Server.MemberID())
		}
	})

	// The old leader's term ends on the majority; a new leader takes over.
	if _, err := mcli.Revoke(ctx, leaseOld.ID); err != nil {
		t.Fatal(err)
	}
	leaseNew, err := mcli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	np, err := mcli.Put(ctx, fmt.Sprintf("%s/jobs/%x", prefix, leaseNew.ID), "new", clientv3.WithLease(leaseNew.ID))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("old term %d ended, new term %d on the majority", zombie, np.Header.Revision)

	time.Sleep(2 * time.Second)
	term := w.Term("jobs")
	if w.Fresh("jobs") && term.HasLeader() && term.Rev == zombie {
		t.Errorf("2s (10 CheckIntervals) after the takeover, on a partitioned member: Fresh=true, term %d (the ended one) current in memory: the zombie's token is accepted without an etcd read (new term %d)", term.Rev, np.Header.Revision)
		// How long the window lasts (bounded).
		start := time.Now()
		for w.Fresh("jobs") && w.Term("jobs").Rev == zombie && time.Since(start) < 25*time.Second {
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("the ended term stayed current and Fresh for %v after the takeover", (2*time.Second + time.Since(start)).Round(100*time.Millisecond))
	}
}

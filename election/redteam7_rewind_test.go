package election

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRedTeam7RevisionRewindReusesTerms: etcd restored from a backup
// (etcdutl snapshot restore without --bump-revision) starts again at the
// backup's revision, and hands out again, as create revisions, numbers
// that were terms before the restore. applyList notices ("etcd revision
// went backwards; trusting the new list") and goes on: a new leader whose
// key is created at revision 500 is then current, and so is the token 500
// of the leader that held term 500 before the restore, a zombie that
// fencegate (memory, Verify) and the backend (high-water 500) cannot tell
// from the new leader: two holders current at once. Every number up to
// the revision applied before the rewind is ambiguous; none of them may
// be admitted as a current term. (README and docs/SAFETY.md say nothing of
// restores; etcd's own advice is --bump-revision.)
//
// Driven through applyList/applyEvents, the watch's own entry points, so
// that the restore needs no etcd of its own.
func TestRedTeam7RevisionRewindReusesTerms(t *testing.T) {
	w, err := NewWatcher(newClient(t), WatcherConfig{Prefix: "/rt7"})
	if err != nil {
		t.Fatal(err)
	}
	kv := func(key string, create, mod int64, value string) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(key), CreateRevision: create, ModRevision: mod, Value: []byte(value)}
	}
	// Before the restore: leader "old" holds term 500; etcd is at 600.
	w.applyList(600, []*mvccpb.KeyValue{kv("/rt7/jobs/a", 500, 500, "old")})
	if got := w.Term("jobs"); got.Rev != 500 {
		t.Fatalf("before the restore: got %+v, want term 500", got)
	}
	// etcd restored from a backup taken at revision 300, when no one led;
	// the watch breaks and the prefix is listed again.
	w.applyList(300, nil)
	// A new leader campaigns; its key happens to be created at 500.
	w.applyEvents([]*clientv3.Event{{Type: clientv3.EventTypePut, Kv: kv("/rt7/jobs/b", 500, 500, "new")}}, 0)

	got := w.Term("jobs")
	if got.HasLeader() && got.Rev == 500 {
		t.Fatalf("after etcd's revision went back from 600 to 300, memory holds %+v: token 500, held before the "+
			"restore by %q and now by %q, is current for both", got, "old", "new")
	}
}

package api_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestUnknownFenceSaysSo: a token for a fence no leader ever led (a typo in
// the fence's name, most often) is refused UNKNOWN_TERM with a hint to
// check the name; a forged token for an election that has had leaders is
// refused without it.
func TestUnknownFenceSaysSo(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	l := campaign(t, newEtcdClient(t), fence, "worker-1")
	waitTerm(t, r, fence, l.token)
	const hint = "is the fence name right?"

	typo := fence + "-typo"
	got := execHTTP(t, r, typo, l.token, insert(table, "w", l.token))
	wantRefusal(t, got, 400, "UNKNOWN_TERM")
	if msg := fmt.Sprint(got.body["message"]); !strings.Contains(msg, hint) {
		t.Errorf("a fence no leader ever led: message %q, want it to ask %q", msg, hint)
	}
	got = execHTTP(t, r, fence, l.token+1000, insert(table, "w", l.token+1000))
	wantRefusal(t, got, 400, "UNKNOWN_TERM")
	if msg := fmt.Sprint(got.body["message"]); strings.Contains(msg, hint) {
		t.Errorf("a forged token of an election with a leader: message %q asks about the name", msg)
	}
}

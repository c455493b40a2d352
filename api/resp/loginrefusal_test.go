package resp_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
)

// TestAuthRefusalsRecorded: an AUTH or HELLO the listener refuses for a
// fence or token of the wrong form (a worker with a broken password) was
// refused to the client alone: no count in fencegate_rejections_total, no
// log line, no audit record, so that on-call could not see a worker that
// never wrote (found by an on-call walkthrough). Each is now recorded as
// the refused write it stands for.
func TestAuthRefusalsRecorded(t *testing.T) {
	e, reg, al := rt9Env(t, resp.Config{})
	r := e.raw(t)
	for _, tc := range []struct {
		name, send, reason, fence string
	}{
		{"AUTH, malformed token", cmd("AUTH", "authref", "x1"), "INVALID_TOKEN", "authref"},
		{"HELLO, bad fence name", cmd("HELLO", "3", "AUTH", "bad{name}", "1"), "INVALID_REQUEST", "bad{name}"},
	} {
		before := len(al.all())
		r.send(tc.send)
		if got := r.reply(); !strings.HasPrefix(got, "-"+tc.reason+" ") {
			t.Errorf("%s: got %q, want -%s", tc.name, got, tc.reason)
		}
		recs := al.all()[before:]
		if len(recs) != 1 || recs[0].Outcome != tc.reason || recs[0].Fence != tc.fence || recs[0].Protocol != proxy.ProtocolRESP || recs[0].Action != "redis.write" {
			t.Errorf("%s: got audit records %+v, want one redis.write %s of fence %q over resp", tc.name, recs, tc.reason, tc.fence)
		}
	}
	for reason, want := range map[string]float64{"invalid_token": 1, "invalid_request": 1} {
		if got := rt9Counter(t, reg, "fencegate_rejections_total", map[string]string{"fence": "_other", "reason": reason}); got != want {
			t.Errorf("fencegate_rejections_total{fence=\"_other\",reason=%q}: got %v, want %v", reason, got, want)
		}
	}
}

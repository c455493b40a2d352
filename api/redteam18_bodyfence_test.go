package api_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// TestRedTeam18BodyFenceDisagreesWithPath: the fence of an HTTP write is
// the path's (API.md: POST /v1/fences/{fence}/sql and /redis, whose body is
// {"statements": [...]} or {"commands": [...]}). grpc-gateway also accepts
// the request message's own "fence" field in the body (body: "*") and then
// silently overwrites it with the path's: a body that names fence B posted
// to /v1/fences/A/sql runs as a write under A's token and high-water mark,
// and the answer says "fence": "A". The request is ambiguous, two fences
// in one write, as two Fencing-Token headers are (refused INVALID_TOKEN),
// and as a "token" in the body is (refused INVALID_REQUEST, unknown
// field); a client that builds its body for B and its URL for A gets
// B's statements fenced by A. The same for /reset, a fence.admin action
// that lowers A's high-water mark although the body names B.
// Expected (API.md, INVALID_REQUEST: "malformed body"): a body whose
// "fence" differs from the path's is refused with 400 INVALID_REQUEST and
// nothing is written or lowered.
func TestRedTeam18BodyFenceDisagreesWithPath(t *testing.T) {
	r := startReplica(t, true)
	c := db(t)
	rc := rdb(t)
	table := ledgerTable(t, c)
	fence := fenceName(t)
	other := fence + "-other"
	cli := newEtcdClient(t)
	l := campaign(t, cli, fence, "worker-a")
	lo := campaign(t, cli, other, "worker-b")
	waitTerm(t, r, fence, l.token)
	waitTerm(t, r, other, lo.token)
	tok := fmt.Sprint(l.token)
	key := "{" + fence + "}:k" // a key of the path's fence, as the key rules want

	// Both fences have a mark, so a reset has something to lower.
	if got := execHTTP(t, r, other, lo.token, `{"sql":"SELECT 1"}`); got.code != http.StatusOK {
		t.Fatalf("control write to %s: %d %v", other, got.code, got.body)
	}

	for _, tc := range []struct{ name, path, body string }{
		{
			"sql", "/v1/fences/" + fence + "/sql",
			`{"fence":"` + other + `","statements":[` + insert(table, "for-"+other, lo.token) + `]}`,
		},
		{
			"redis", "/v1/fences/" + fence + "/redis",
			`{"fence":"` + other + `","commands":[["SET","` + key + `","for-` + other + `"]]}`,
		},
	} {
		got := rtDo(t, http.MethodPost, r.url+tc.path, jsonHdr("Fencing-Token", tok), strings.NewReader(tc.body), 0)
		if got.code != http.StatusBadRequest || got.reason != "INVALID_REQUEST" {
			t.Errorf("HOLE: %s: body fence %q posted to %s: got %d %s %.200s, want 400 INVALID_REQUEST",
				tc.name, other, tc.path, got.code, got.reason, got.body)
		}
	}
	if n := count(t, c, table); n != 0 {
		t.Errorf("HOLE: %d rows written by a write whose body named fence %q and whose path named %q", n, other, fence)
	}
	if err := rc.Get(t.Context(), key).Err(); !errors.Is(err, goredis.Nil) {
		t.Errorf("HOLE: %s written by a write whose body named fence %q and whose path named %q (%v)", key, other, fence, err)
	}

	// Reset: the body names other, the path fence.
	got := rtDo(t, http.MethodPost, r.url+"/v1/fences/"+fence+"/reset", jsonHdr(),
		strings.NewReader(`{"fence":"`+other+`","highWater":"1"}`), 0)
	if got.code != http.StatusBadRequest || got.reason != "INVALID_REQUEST" {
		t.Errorf("HOLE: reset with body fence %q posted to /v1/fences/%s/reset: got %d %s %.200s, want 400 INVALID_REQUEST",
			other, fence, got.code, got.reason, got.body)
	}
}

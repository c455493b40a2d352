package resp_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/redis"
)

// TestRedTeam17LeaseKeyRefusalAbortsPipeline: the listener promises that
// each pipelined command is answered as Redis would answer it, never
// aborted by another command's error (session.exec splits a batch at the
// command a refusal names). The refusal of a command naming a lease
// fence's lease or counter key (plan.withLease) carries no "command"
// metadata, unlike every other per-command refusal, so the listener
// cannot tell which command it is about: a valid SET pipelined with such
// a command is refused with the other command's error, INVALID_REQUEST
// "key ... is the fence's lease", and is not applied, although it names
// only the fence's own key and its token is current. Over HTTP the same
// refusal does not say which command (metadata "command", Exec's doc).
//
// Expected: the SET is answered +OK and applied; only the command naming
// the lease key is refused.
func TestRedTeam17LeaseKeyRefusalAbortsPipeline(t *testing.T) {
	rcfg := redis.DefaultConfig()
	rcfg.Leases = func(fence string) (redis.LeaseKeys, bool) {
		if !strings.HasPrefix(fence, "rt17lease") {
			return redis.LeaseKeys{}, false
		}
		return redis.LeaseKeys{Lease: "{" + fence + "}:lease", Counter: "{" + fence + "}:lease:token"}, true
	}
	e := newEnvRedis(t, resp.Config{}, proxy.Options{}, rcfg)
	ctx := t.Context()
	f := unique("rt17lease")
	tok, _ := e.lead(t, f)
	ts := strconv.FormatUint(tok, 10)
	F := func(s string) string { return "{" + f + "}:" + s }
	lease, counter := F("lease"), F("lease:token")
	if err := e.admin.Set(ctx, lease, "holder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Set(ctx, counter, ts, 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := authRaw(t, e, f, tok)
	// Both in one read, so they go in one batch.
	r.send(cmd("SET", F("k"), "mine") + cmd("GET", lease))
	first := r.reply()
	second := r.reply()
	if first != "+OK" {
		t.Errorf("SET of the fence's own key pipelined before GET of the lease key: got %.200q, want +OK", first)
	}
	if !strings.HasPrefix(second, "-") {
		t.Errorf("GET of the lease key: got %.200q, want a refusal", second)
	}
	if got := e.stored(t, F("k")); got != "mine" {
		t.Errorf("key %s: got %q, want \"mine\" (the SET was valid)", F("k"), got)
	}
}

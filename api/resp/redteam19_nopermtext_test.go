package resp_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/redis"
	"github.com/fencegate/fencegate/proxy/redis/throwaway"
)

// TestRedTeam19RollbackRefusalPassedAsBareNOPERM: when fencegate's Redis
// user may not RESTORE or DEL a written key (a key-scoped ACL, round 17),
// the script refuses the write before running anything ({4, 0,
// 'rollback', key}), and proxy/redis turns that into fencegate's own
// refusal STATEMENT_FAILED with the explanation in its message ("...
// may not RESTORE or DEL key ..., grant them, docs/SECURITY.md") and
// metadata {"error": "NOPERM"}, with no "limit". The RESP listener's
// errorText passes metadata "error" on as if Redis had sent it, so the
// client's whole EXEC is answered with the bare word "-NOPERM": no reason
// first (API.md: "fencegate's refusals are error replies whose first word
// is the reason"), no text, no EXECABORT, nothing saying that nothing was
// applied or what to grant; and it is not an error Redis itself sent.
//
// Expected: "-STATEMENT_FAILED fencegate: ... may not RESTORE or DEL key
// ..." (or EXECABORT with it), as for the limit refusals.
func TestRedTeam19RollbackRefusalPassedAsBareNOPERM(t *testing.T) {
	srv, err := throwaway.Start(t.Context(), throwaway.Options{
		Users: []string{"fencegate on >s3cret ~* +@all -restore (~fencegate:* +restore)"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	rcfg := redis.DefaultConfig()
	rcfg.Username, rcfg.Password = "fencegate", "s3cret"
	e := newEnvAt(t, resp.Config{}, proxy.Options{}, rcfg, srv.Addr())
	f := unique("rt19noperm")
	tok, _ := e.lead(t, f)
	r := authRaw(t, e, f, tok)
	F := func(s string) string { return "{" + f + "}:" + s }
	r.send(cmd("MULTI") + cmd("SET", F("a"), "1") + cmd("SET", F("b"), "2") + cmd("EXEC"))
	for i, want := range []string{"+OK", "+QUEUED", "+QUEUED"} {
		if got := r.reply(); got != want {
			t.Fatalf("reply %d: got %q, want %q", i, got, want)
		}
	}
	got := r.reply()
	if got == "-NOPERM" || !strings.HasPrefix(got, "-STATEMENT_FAILED") && !strings.HasPrefix(got, "-EXECABORT") {
		t.Errorf("HOLE: EXEC refused by fencegate's own rollback-permission check answered %q: not the reason first, no explanation", got)
	}
	if e.stored(t, F("a")) != "" || e.stored(t, F("b")) != "" {
		t.Errorf("refused EXEC applied something")
	}
}

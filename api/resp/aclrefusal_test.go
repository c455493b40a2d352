package resp_test

import (
	"strconv"
	"testing"

	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/redis"
	"github.com/fencegate/fencegate/proxy/redis/throwaway"
)

// TestACLRefusalAnswersAsFencegate: a write refused because fencegate's
// Redis user may not run a command the script needs on a key (here
// RESTORE of a key a ZADD writes, for its rollback) is answered as
// fencegate's refusal, the reason first and the command and key named,
// and in a pipeline it is that command's answer only: the commands around
// it are answered as Redis would (a lone SET needs no rollback and runs).
// In MULTI it aborts the transaction, nothing applied. (Found by red team
// 19: both were answered with a bare -NOPERM, no reason, no text.)
func TestACLRefusalAnswersAsFencegate(t *testing.T) {
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
	f := unique("aclpipe")
	tok, _ := e.lead(t, f)
	r := authRaw(t, e, f, tok)
	F := func(s string) string { return "{" + f + "}:" + s }
	refused := "-STATEMENT_FAILED fencegate: fencegate's Redis user may not RESTORE key " + strconv.Quote(F("z")) +
		", which rolling this write back would need (nothing written; grant it, docs/SECURITY.md)"

	r.send(cmd("SET", F("a"), "1") + cmd("ZADD", F("z"), "1", "m") + cmd("SET", F("b"), "2"))
	for i, want := range []string{"+OK", refused, "+OK"} {
		if got := r.reply(); got != want {
			t.Errorf("pipelined reply %d: got %q, want %q", i, got, want)
		}
	}
	if a, b := e.stored(t, F("a")), e.stored(t, F("b")); a != "1" || b != "2" {
		t.Errorf("the pipeline's other commands: got a=%q b=%q, want 1 and 2", a, b)
	}
	if n := e.admin.Exists(t.Context(), F("z")).Val(); n != 0 {
		t.Errorf("refused ZADD created its key")
	}

	r.send(cmd("MULTI") + cmd("SET", F("c"), "3") + cmd("ZADD", F("z"), "1", "m") + cmd("EXEC"))
	for i, want := range []string{"+OK", "+QUEUED", "+QUEUED"} {
		if got := r.reply(); got != want {
			t.Fatalf("reply %d: got %q, want %q", i, got, want)
		}
	}
	want := "-EXECABORT Transaction discarded, nothing applied: STATEMENT_FAILED fencegate: command 0: fencegate's Redis user may not RESTORE key " +
		strconv.Quote(F("c")) + ", which rolling this write back would need (nothing written; grant it, docs/SECURITY.md)"
	if got := r.reply(); got != want {
		t.Errorf("EXEC: got %q, want %q", got, want)
	}
	if e.stored(t, F("c")) != "" {
		t.Errorf("refused EXEC applied its SET")
	}
}

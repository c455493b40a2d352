package resp_test

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
)

// redisPyScript writes with redis-py (Debian's python3-redis) as a worker
// would: plain commands, a pipeline and a MULTI/EXEC transaction, then
// prints OK, or the error's text.
const redisPyScript = `
import sys, redis
host, port, fence, token, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
k = "{" + fence + "}:" + tag
try:
    r = redis.Redis(host=host, port=port, username=fence, password=token, client_name="py-worker")
    r.set(k, "v")
    assert r.get(k) == b"v", r.get(k)
    p = r.pipeline(transaction=False)
    p.incr(k + "-n"); p.hset(k + "-h", "f", "1")
    p.execute()
    p = r.pipeline(transaction=True)
    p.rpush(k + "-l", "a", "b"); p.lrange(k + "-l", 0, -1)
    res = p.execute()
    assert res == [2, [b"a", b"b"]], res
    print("OK")
except redis.exceptions.RedisError as e:
    print(str(e))
`

// TestRedisPy drives redis-py through the listener with the leader's token
// and the zombie's: the zombie is refused, and nothing of it is stored.
func TestRedisPy(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("py")
	old, cur := e.succession(t, f)
	run := func(token uint64, tag string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		// Debian's python3, where python3-redis is installed (.ci/deps.sh).
		out, err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", redisPyScript, "127.0.0.1", e.port, f, strconv.FormatUint(token, 10), tag).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-py: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run(cur, "leader"); got != "OK" {
		t.Errorf("redis-py with the leader's token: got %q, want OK", got)
	}
	if got := run(old, "zombie"); !strings.HasPrefix(got, "STALE_TOKEN fencegate: ") {
		t.Errorf("redis-py with the zombie's token: got %q, want STALE_TOKEN fencegate: ...", got)
	}
	if ks := e.keys(t, "{"+f+"}:zombie*"); len(ks) != 0 {
		t.Errorf("zombie's keys: got %v stored, want none", ks)
	}
	if got := e.stored(t, "{"+f+"}:leader"); got != "v" {
		t.Errorf("leader's key: got %q, want v", got)
	}
}

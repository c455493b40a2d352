package resp_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
)

// TestNodeClients drives the two Node Redis clients, unmodified, through
// the listener (their programs in ../testdata/node): ioredis, whose
// defaults send INFO after AUTH and wait for loading:0 before any other
// command, and node-redis in RESP2 and in RESP3 (HELLO 3 AUTH ...). Each
// writes with the leader's token (plain commands, a pipeline, MULTI/EXEC);
// with the zombie's it is refused and stores nothing; a connection that
// AUTHs again with the leader's token writes.
func TestNodeClients(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("node")
	old, cur := e.succession(t, f)
	if _, err := os.Stat("../testdata/node/node_modules/ioredis"); err != nil {
		t.Fatalf("ioredis: %v: run make deps (npm ci --prefix api/testdata/node)", err)
	}
	clients := []struct {
		name string
		args []string // after the program's own
	}{
		{"ioredis.mjs", nil},
		{"redis.mjs", []string{"2"}},
		{"redis.mjs", []string{"3"}},
	}
	for i, c := range clients {
		t.Run(strings.Join(append([]string{strings.TrimSuffix(c.name, ".mjs")}, c.args...), " RESP"), func(t *testing.T) {
			run := func(token uint64, authToken, tag string) string {
				t.Helper()
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				args := append([]string{"../testdata/node/" + c.name, e.port, f, strconv.FormatUint(token, 10), authToken, tag}, c.args...)
				out, err := exec.CommandContext(ctx, "node", args...).CombinedOutput()
				if err != nil {
					t.Fatalf("node %v: %v: %s", args, err, out)
				}
				return strings.TrimSpace(string(out))
			}
			tag := func(s string) string { return strconv.Itoa(i) + s }
			if got := run(cur, "-", tag("leader")); got != "OK" {
				t.Errorf("leader's token: got %q, want OK", got)
			}
			if got := run(old, "-", tag("zombie")); !strings.HasPrefix(got, "ERR STALE_TOKEN fencegate: ") {
				t.Errorf("zombie's token: got %q, want ERR STALE_TOKEN fencegate: ...", got)
			}
			if ks := e.keys(t, "{"+f+"}:"+tag("zombie")+"*"); len(ks) != 0 {
				t.Errorf("zombie's keys: got %v stored, want none", ks)
			}
			if got := run(old, strconv.FormatUint(cur, 10), tag("auth")); got != "OK" {
				t.Errorf("zombie's token, then AUTH with the leader's: got %q, want OK", got)
			}
			for _, s := range []string{"leader", "auth"} {
				if got := e.stored(t, "{"+f+"}:"+tag(s)); got != "v" {
					t.Errorf("key of the %s run: got %q, want v", s, got)
				}
			}
		})
	}
}

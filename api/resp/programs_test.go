package resp_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
)

// run runs a Redis program against the listener and returns its output.
func (e *env) run(t *testing.T, stdin string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, append([]string{"-h", "127.0.0.1", "-p", e.port}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// keys lists the keys matching pattern straight in Redis.
func (e *env) keys(t *testing.T, pattern string) []string {
	t.Helper()
	ks, err := e.admin.Keys(t.Context(), pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// TestRedisCli runs the real redis-cli (RESP2 and -3) with the leader's
// token, the zombie's, and a token changed with AUTH in one session.
func TestRedisCli(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("cli")
	old, cur := e.succession(t, f)
	k := "{" + f + "}:"
	for _, proto := range [][]string{nil, {"-3"}} {
		cli := func(token uint64, stdin string, args ...string) string {
			t.Helper()
			a := append(append([]string{}, proto...), "--user", f, "--pass", strconv.FormatUint(token, 10), "--no-auth-warning")
			out, err := e.run(t, stdin, "redis-cli", append(a, args...)...)
			if err != nil {
				t.Fatalf("redis-cli %v: %v: %s", args, err, out)
			}
			return strings.TrimSpace(out)
		}
		name := fmt.Sprintf("p%d", len(proto))
		tests := []struct {
			token uint64
			stdin string
			args  []string
			want  string
		}{
			{cur, "", []string{"SET", k + name + "leader", "v"}, "OK"},
			{cur, "", []string{"INCRBY", k + name + "n", "5"}, "5"},
			{old, "", []string{"SET", k + name + "zombie", "v"}, "STALE_TOKEN fencegate: token " + strconv.FormatUint(old, 10) + " is below"},
			{cur, "", []string{"PING"}, "PONG"},
			{
				old, "SET " + k + name + "auth 1\nAUTH " + f + " " + strconv.FormatUint(cur, 10) + "\nSET " + k + name + "auth 2\nGET " + k + name + "auth\n", nil,
				"STALE_TOKEN fencegate: token " + strconv.FormatUint(old, 10) + " is below the fence's high-water mark " + strconv.FormatUint(cur, 10) + "\n\nOK\nOK\n2",
			},
			{cur, "", []string{"LPUSH", k + name + "leader", "x"}, "WRONGTYPE Operation against a key holding the wrong kind of value"},
		}
		for _, tt := range tests {
			if got := cli(tt.token, tt.stdin, tt.args...); !strings.HasPrefix(got, tt.want) {
				t.Errorf("redis-cli %v %v with token %d: got %q, want %q...", proto, tt.args, tt.token, got, tt.want)
			}
		}
		if got := e.stored(t, k+name+"leader"); got != "v" {
			t.Errorf("leader's key: got %q, want v", got)
		}
		if got := e.stored(t, k+name+"zombie"); got != "" {
			t.Errorf("zombie's key: got %q stored, want nothing", got)
		}
		if got := e.stored(t, k+name+"auth"); got != "2" {
			t.Errorf("key written after AUTH: got %q, want 2", got)
		}
	}
}

// TestRedisBenchmark runs the real redis-benchmark with {fence}-tagged
// keys, pipelined and not: the leader's writes are all stored, the
// zombie's are refused and none is.
func TestRedisBenchmark(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("bench")
	old, cur := e.succession(t, f)
	for _, p := range []string{"1", "16"} {
		out, err := e.run(t, "", "redis-benchmark", "--user", f, "-a", strconv.FormatUint(cur, 10), "-c", "8", "-n", "2000", "-P", p,
			"-r", "100000", "-q", "SET", "{"+f+"}:lead:__rand_int__", "v")
		if err != nil || strings.Contains(out, "Error") || !strings.Contains(out, "requests per second") {
			t.Fatalf("redis-benchmark -P %s with the leader's token: %v: %s", p, err, out)
		}
	}
	if n := len(e.keys(t, "{"+f+"}:lead:*")); n < 100 {
		t.Errorf("leader's keys: got %d, want many", n)
	}
	out, err := e.run(t, "", "redis-benchmark", "--user", f, "-a", strconv.FormatUint(old, 10), "-c", "8", "-n", "2000",
		"-r", "100000", "-q", "SET", "{"+f+"}:zombie:__rand_int__", "v")
	if err == nil || !strings.Contains(out, "STALE_TOKEN fencegate:") {
		t.Errorf("redis-benchmark with the zombie's token: got %v: %s, want it to stop on STALE_TOKEN", err, out)
	}
	if ks := e.keys(t, "{"+f+"}:zombie:*"); len(ks) != 0 {
		t.Errorf("zombie's keys: got %d stored (%v), want none", len(ks), ks[:min(3, len(ks))])
	}
}

package resp_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/internal/goworkers"
	"github.com/fencegate/fencegate/api/resp"
)

// goWorkerDir holds the programs of ../testdata/go once goWorkers built
// them.
var goWorkerDir string

var goWorkers = sync.OnceValue(func() error { return goworkers.Build(goWorkerDir) })

// TestClientLibraries drives Redis clients, unmodified, through the
// listener, each a program of ../testdata: the Node clients ioredis, whose
// defaults send INFO after AUTH and wait for loading:0 before any other
// command, and node-redis in RESP2 and in RESP3 (HELLO 3 AUTH ...), in
// ../testdata/node; redigo (AUTH and CLIENT SETNAME as it dials, a Pool
// that PINGs on borrow, Send/Flush/Receive, MULTI/EXEC, a Lua script
// refused) and rueidis (HELLO 3 AUTH, then CLUSTER SLOTS to learn whether
// it talks to a cluster, auto-pipelining, DoMulti, MULTI/EXEC on a
// dedicated connection), in ../testdata/go, a module of its own; redis-rb
// (Debian's ruby-redis: AUTH and CLIENT SETNAME, pipelined, multi, a Lua
// script refused) and phpredis (Debian's php-redis: auth([user, pass]),
// pipeline, multi, a Lua script refused). Each writes with the leader's
// token (plain commands, a pipeline, MULTI/EXEC); with the zombie's it is
// refused and stores nothing; a connection that AUTHs again with the
// leader's token writes.
func TestClientLibraries(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("lib")
	old, cur := e.succession(t, f)
	if _, err := os.Stat("../testdata/node/node_modules/ioredis"); err != nil {
		t.Fatalf("ioredis: %v: run make deps (npm ci --prefix api/testdata/node)", err)
	}
	if err := goWorkers(); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name string
		argv []string // the program; the worker's arguments follow
		opts []string // after the worker's arguments
	}{
		{"ioredis", []string{"node", "../testdata/node/ioredis.mjs"}, nil},
		{"node-redis RESP2", []string{"node", "../testdata/node/redis.mjs"}, []string{"2"}},
		{"node-redis RESP3", []string{"node", "../testdata/node/redis.mjs"}, []string{"3"}},
		{"redigo", []string{filepath.Join(goWorkerDir, "redigoworker")}, nil},
		{"rueidis", []string{filepath.Join(goWorkerDir, "rueidisworker")}, nil},
		{"redis-rb", []string{"ruby", "../testdata/ruby/redis_worker.rb"}, nil},
		{"phpredis", []string{"php", "../testdata/php/phpredis_worker.php"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := func(token uint64, authToken, tag string) string {
				t.Helper()
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				args := slices.Concat(c.argv[1:], []string{e.port, f, strconv.FormatUint(token, 10), authToken, tag}, c.opts)
				out, err := exec.CommandContext(ctx, c.argv[0], args...).CombinedOutput()
				if err != nil {
					t.Fatalf("%s %v: %v: %s", c.argv[0], args, err, out)
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

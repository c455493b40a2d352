package main

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/election/freeport"
	redisthrowaway "github.com/fencegate/fencegate/proxy/redis/throwaway"
)

// TestServeRedisLease runs `fencegate serve --term-sources=lease-*=redis-lease`
// with its RESP listener. The seed's lease worker is redis-cli straight to
// Redis (SET lease:F id NX PX ttl, INCR lease:F:token, DEL to release);
// the writes are redis-cli through the listener. The lease holder's token
// is accepted; a forged one is UNKNOWN_TERM, a released or expired
// lease's TERM_ENDED, an earlier holder's STALE_TOKEN, and none of them
// stores anything. fencegate reaches Redis over its Unix socket.
func TestServeRedisLease(t *testing.T) {
	e := newSecureEnv(t)
	rd, err := redisthrowaway.Start(t.Context(), redisthrowaway.Options{UnixSocket: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	addr := freeport.Addr(t)
	// fencegate reaches Redis, the backend's and the leases', over its Unix
	// socket; the test seeds and checks over TCP.
	g := e.serveGateway(t, "--redis-addr="+rd.SocketPath(), "--redis-listen-addr="+addr, "--term-sources=lease-*=redis-lease")
	rhost, rport, _ := strings.Cut(rd.Addr(), ":")
	host, port, _ := strings.Cut(addr, ":")
	const fence = "lease-r"
	seed := func(args ...string) string {
		t.Helper()
		return redisCli(t, append([]string{"-h", rhost, "-p", rport}, args...)...)
	}
	acquire := func(id, px string) int64 {
		t.Helper()
		if got := seed("SET", "lease:"+fence, id, "NX", "PX", px); got != "OK" {
			t.Fatalf("%s: SET NX: got %q, want OK", id, got)
		}
		tok, err := strconv.ParseInt(seed("INCR", "lease:"+fence+":token"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	write := func(step string, tok int64, want string) {
		t.Helper()
		key := "{" + fence + "}:" + strings.ReplaceAll(step, " ", "-")
		got := redisCli(t, "-h", host, "-p", port, "--user", fence, "--pass", strconv.FormatInt(tok, 10), "SET", key, "v")
		if !strings.HasPrefix(got, want) {
			t.Fatalf("%s: token %d: got %q, want %q...", step, tok, got, want)
		}
		stored := seed("EXISTS", key)
		if wantStored := map[bool]string{true: "1", false: "0"}[want == "OK"]; stored != wantStored {
			t.Fatalf("%s: EXISTS %s: got %s, want %s", step, key, stored, wantStored)
		}
	}

	write("forged before any lease", 1, "UNKNOWN_TERM ")
	ta := acquire("worker-a", "60000")
	write("a holds the lease", ta, "OK")
	write("forged above the counter", ta+1, "UNKNOWN_TERM ")
	seed("DEL", "lease:"+fence)
	write("a released", ta, "TERM_ENDED ")
	tb := acquire("worker-b", "4000")
	// The poll (every second) shows b's term; until then memory may still
	// say a's term ended, and refuse a with TERM_ENDED.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(fenceJSON(t, g.httpAddr, fence), fmt.Sprintf(`"term":"%d"`, tb)); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/fences/%s never showed term %d: %s", fence, tb, fenceJSON(t, g.httpAddr, fence))
		}
	}
	write("a is a zombie", ta, "STALE_TOKEN ")
	write("b holds the lease", tb, "OK")
	for deadline := time.Now().Add(10 * time.Second); seed("EXISTS", "lease:"+fence) != "0"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("b's lease did not expire")
		}
	}
	write("b's lease expired", tb, "TERM_ENDED ")
}

// fenceJSON is GET /v1/fences/<fence>'s body.
func fenceJSON(t *testing.T, httpAddr, fence string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/v1/fences/" + fence)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestRedisLeaseFlags: bad key patterns, and a redis-lease route with no
// Redis to read leases from, are one-line errors at start.
func TestRedisLeaseFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--redis-addr=127.0.0.1:1", "--redis-lease-key=lease"}, "--redis-lease-key \"lease\": want exactly one %s"},
		{[]string{"serve", "--redis-addr=127.0.0.1:1", "--redis-lease-counter={x}:%s"}, "--redis-lease-counter \"{x}:%s\": its hash tag must be {%s}"},
		{[]string{"serve", "--redis-addr=127.0.0.1:1", "--redis-lease-key=l:%s", "--redis-lease-counter=l:%s"}, "are both"},
		{[]string{"serve", "--redis-addr=127.0.0.1:1", "--redis-lease-key=l-%s", "--redis-lease-counter=l-%s-n"}, `--redis-lease-key "l-%s" and --redis-lease-counter "l-%s-n" overlap`},
		{[]string{"serve", "--postgres-dsn=postgres://x@127.0.0.1:1/x", "--term-sources=l-*=redis-lease"}, "set --redis-lease-addr or --redis-addr"},
	} {
		err := run(t.Context(), tt.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: got %v, want one line with %q", tt.args, err, tt.want)
		}
	}
}

// TestServeRedisLeaseKeysRefusedAtAnotherAddress: the leases' Redis named
// by another address than the backend's (localhost, 127.0.0.1) is the
// same Redis. With lease keys that carry the fence's hash tag, a writer
// of the fence could then write its own lease's counter through fencegate
// and hand itself the next token. The keys are refused whatever the
// addresses, and the two are found to be one Redis (INFO's run_id).
func TestServeRedisLeaseKeysRefusedAtAnotherAddress(t *testing.T) {
	e := newSecureEnv(t)
	rd, err := redisthrowaway.Start(t.Context(), redisthrowaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	addr := freeport.Addr(t)
	rhost, rport, _ := strings.Cut(rd.Addr(), ":")
	e.serveGateway(t, "--redis-addr="+rd.Addr(), "--redis-lease-addr=localhost:"+rport, "--redis-listen-addr="+addr,
		"--term-sources=lease-*=redis-lease", "--redis-lease-key={%s}:lease", "--redis-lease-counter={%s}:lease:token")
	host, port, _ := strings.Cut(addr, ":")
	const fence = "lease-s"
	seed := func(args ...string) string {
		t.Helper()
		return redisCli(t, append([]string{"-h", rhost, "-p", rport}, args...)...)
	}
	if got := seed("SET", "{"+fence+"}:lease", "worker-a", "NX", "PX", "60000"); got != "OK" {
		t.Fatalf("SET NX: got %q", got)
	}
	tok := seed("INCR", "{"+fence+"}:lease:token")
	for _, cmd := range [][]string{
		{"SET", "{" + fence + "}:lease:token", "1000"},
		{"SET", "{" + fence + "}:lease", "worker-z", "PX", "600000"},
	} {
		got := redisCli(t, append([]string{"-h", host, "-p", port, "--user", fence, "--pass", tok}, cmd...)...)
		if !strings.HasPrefix(got, "INVALID_REQUEST ") {
			t.Errorf("%v through fencegate with the lease holder's token: got %q, want INVALID_REQUEST", cmd, got)
		}
	}
	if got := seed("GET", "{"+fence+"}:lease:token"); got != tok {
		t.Errorf("the lease's counter: got %s, want %s (untouched)", got, tok)
	}
	if got := seed("GET", "{"+fence+"}:lease"); got != "worker-a" {
		t.Errorf("the lease: got %s, want worker-a (untouched)", got)
	}
	// The holder's own writes pass, checked in the script (one Redis).
	if got := redisCli(t, "-h", host, "-p", port, "--user", fence, "--pass", tok, "SET", "{"+fence+"}:k", "v"); got != "OK" {
		t.Errorf("the lease holder's write: got %q, want OK", got)
	}
}

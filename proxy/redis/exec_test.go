package redis

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/tokens"
)

func execOK(t *testing.T, fence string, tok tokens.Token, cmds ...[]string) []any {
	t.Helper()
	res, err := backend.Exec(t.Context(), fence, tok, cmds)
	if err != nil {
		t.Fatalf("Exec(%s, %d): got %v, want nil", fence, tok, err)
	}
	return res
}

func refusal(t *testing.T, err error, want tokens.Reason) *tokens.RefusalError {
	t.Helper()
	r, ok := tokens.AsRefusal(err)
	if !ok {
		t.Fatalf("error: got %v (%T), want a *tokens.RefusalError %s", err, err, want)
	}
	if r.Reason != want {
		t.Fatalf("reason: got %s (%v), want %s", r.Reason, err, want)
	}
	return r
}

func highWater(t *testing.T, fence string) tokens.Token {
	t.Helper()
	hw, ok, err := backend.HighWater(t.Context(), fence)
	if err != nil {
		t.Fatalf("HighWater(%s): %v", fence, err)
	}
	if !ok {
		return 0
	}
	return hw
}

// dump returns every key of fence's tag with its type and value, for
// comparing the whole state before and after a refused write.
func dump(t *testing.T, db *goredis.Client, fence string) map[string]string {
	t.Helper()
	ctx := t.Context()
	keys, err := db.Keys(ctx, "{"+fence+"}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]string{}
	for _, k := range keys {
		d, err := db.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		state[k] = d
	}
	return state
}

func TestExecAcceptsAndRaisesHighWater(t *testing.T) {
	t.Parallel()
	db := admin(t)
	fence := unique("accept")
	list := key(fence, "list")
	steps := []struct {
		token  tokens.Token
		wantHW tokens.Token
	}{
		{5, 5},
		{7, 7},
		{7, 7}, // equal: the same leader writes again
		{10, 10},
		{1 << 60, 1 << 60},
		{1<<60 + 1, 1<<60 + 1}, // the same double as 1<<60: compared exactly
		{math.MaxUint64, math.MaxUint64},
	}
	for i, st := range steps {
		execOK(t, fence, st.token, []string{"RPUSH", list, strconv.Itoa(i)})
		if got := highWater(t, fence); got != st.wantHW {
			t.Errorf("step %d: high-water got %d, want %d", i, got, st.wantHW)
		}
	}
	if got := db.LLen(t.Context(), list).Val(); got != int64(len(steps)) {
		t.Errorf("list length: got %d, want %d", got, len(steps))
	}
	if got := db.Get(t.Context(), TokenKey(fence)).Val(); got != "18446744073709551615" {
		t.Errorf("token key: got %q, want %q", got, "18446744073709551615")
	}

	fences, err := backend.Fences(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, f := range fences {
		if f.Name == fence {
			found = true
			if f.HighWater != math.MaxUint64 {
				t.Errorf("Fences: got %+v, want high-water %d", f, uint64(math.MaxUint64))
			}
		}
	}
	if !found {
		t.Errorf("Fences: got no %s in %v", fence, fences)
	}
	if _, ok, err := backend.HighWater(t.Context(), unique("never")); ok || err != nil {
		t.Errorf("HighWater of unknown fence: got ok=%v err=%v, want false, nil", ok, err)
	}
}

func TestExecStaleTokenWritesNothing(t *testing.T) {
	t.Parallel()
	db := admin(t)
	fence := unique("stale")
	execOK(t, fence, 1<<60+1, []string{"SET", key(fence, "v"), "leader"})
	before := dump(t, db, fence)
	for _, tok := range []tokens.Token{1 << 60, 1<<60 - 1, 99, 1} {
		_, err := backend.Exec(t.Context(), fence, tok, [][]string{
			{"SET", key(fence, "v"), "zombie"},
			{"RPUSH", key(fence, "new"), "zombie"},
		})
		r := refusal(t, err, tokens.ReasonStaleToken)
		if r.HighWater != 1<<60+1 || r.Fence != fence || r.Token != tok {
			t.Errorf("refusal: got fence %s token %d high-water %d, want %s %d %d", r.Fence, r.Token, r.HighWater, fence, tok, uint64(1<<60+1))
		}
		if !errors.Is(err, tokens.ErrStale) {
			t.Errorf("errors.Is(%v, ErrStale): got false, want true", err)
		}
	}
	if after := dump(t, db, fence); !reflect.DeepEqual(after, before) {
		t.Errorf("state after stale writes: got %v, want unchanged %v", after, before)
	}
	if got := highWater(t, fence); got != 1<<60+1 {
		t.Errorf("high-water: got %d, want %d", got, uint64(1<<60+1))
	}
}

func TestExecRefusesBeforeSending(t *testing.T) {
	t.Parallel()
	fence := unique("refuse")
	set := []string{"SET", key(fence, "a"), "1"}
	tests := []struct {
		name    string
		fence   string
		token   tokens.Token
		cmds    [][]string
		want    tokens.Reason
		command string // metadata "command", "" for none
	}{
		{"no commands", fence, 1, nil, tokens.ReasonInvalidRequest, ""},
		{"empty fence", "", 1, [][]string{set}, tokens.ReasonInvalidRequest, ""},
		{"brace in fence", "a}b", 1, [][]string{set}, tokens.ReasonInvalidRequest, ""},
		{"zero token", fence, 0, [][]string{set}, tokens.ReasonInvalidRequest, ""},
		{"empty command", fence, 1, [][]string{set, {}}, tokens.ReasonInvalidRequest, "1"},
		{"empty name", fence, 1, [][]string{set, {""}}, tokens.ReasonInvalidRequest, "1"},
		{"EVAL", fence, 1, [][]string{set, {"EVAL", "return 1", "0"}}, tokens.ReasonCommandNotAllowed, "1"},
		{"evalsha lower case", fence, 1, [][]string{set, {"evalsha", "abc", "0"}}, tokens.ReasonCommandNotAllowed, "1"},
		{"FLUSHALL", fence, 1, [][]string{set, {"FLUSHALL"}}, tokens.ReasonCommandNotAllowed, "1"},
		{"CONFIG", fence, 1, [][]string{set, {"CONFIG", "SET", "maxmemory", "1"}}, tokens.ReasonCommandNotAllowed, "1"},
		{"KEYS", fence, 1, [][]string{set, {"KEYS", "*"}}, tokens.ReasonCommandNotAllowed, "1"},
		{"BLPOP", fence, 1, [][]string{set, {"BLPOP", key(fence, "l"), "0"}}, tokens.ReasonCommandNotAllowed, "1"},
		{"XREAD BLOCK", fence, 1, [][]string{set, {"XREAD", "BLOCK", "0", "STREAMS", key(fence, "x"), "$"}}, tokens.ReasonCommandNotAllowed, "1"},
		{"SUBSCRIBE", fence, 1, [][]string{set, {"SUBSCRIBE", "ch"}}, tokens.ReasonCommandNotAllowed, "1"},
		{"MULTI", fence, 1, [][]string{{"MULTI"}, set}, tokens.ReasonCommandNotAllowed, "0"},
		{"SELECT", fence, 1, [][]string{{"SELECT", "1"}, set}, tokens.ReasonCommandNotAllowed, "0"},
		{"MOVE", fence, 1, [][]string{set, {"MOVE", key(fence, "a"), "1"}}, tokens.ReasonCommandNotAllowed, "1"},
		{"unknown", fence, 1, [][]string{set, {"FROBNICATE", key(fence, "a")}}, tokens.ReasonCommandNotAllowed, "1"},
		// U+017F, which strings.ToUpper makes S: Redis knows no such command.
		{"long s set", fence, 1, [][]string{set, {"ſet", key(fence, "a"), "2"}}, tokens.ReasonCommandNotAllowed, "1"},
		{"long s script", fence, 1, [][]string{set, {"ſcript", "FLUSH"}}, tokens.ReasonCommandNotAllowed, "1"},
		{"optional not allowed", fence, 1, [][]string{set, {"RENAME", key(fence, "a"), key(fence, "b")}}, tokens.ReasonCommandNotAllowed, "1"},
		{"GET too many args", fence, 1, [][]string{set, {"GET", key(fence, "a"), "x"}}, tokens.ReasonInvalidRequest, "1"},
		{"SET too few args", fence, 1, [][]string{{"set", key(fence, "a")}}, tokens.ReasonInvalidRequest, "0"},
		{"MSET odd args", fence, 1, [][]string{set, {"MSET", key(fence, "a"), "1", key(fence, "b")}}, tokens.ReasonInvalidRequest, "1"},
		{"token key", fence, 1, [][]string{set, {"SET", TokenKey(fence), "999"}}, tokens.ReasonInvalidRequest, "1"},
		{"other fence's token key", fence, 1, [][]string{{"DEL", TokenKey("other")}}, tokens.ReasonInvalidRequest, "0"},
		{"no hash tag", fence, 1, [][]string{set, {"SET", "plain", "1"}}, tokens.ReasonInvalidRequest, "1"},
		{"cross slot", fence, 1, [][]string{set, {"LMOVE", key(fence, "l"), key(fence+"x", "l"), "LEFT", "RIGHT"}}, tokens.ReasonInvalidRequest, "1"},
		{"too many args", fence, 1, [][]string{append([]string{"RPUSH", key(fence, "l")}, make([]string, maxArgs)...)}, tokens.ReasonInvalidRequest, "0"},
	}
	db := admin(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := backend.Exec(t.Context(), tt.fence, tt.token, tt.cmds)
			r := refusal(t, err, tt.want)
			if r.Fence != tt.fence || r.Token != tt.token || r.Msg == "" {
				t.Errorf("refusal: got fence %q token %d msg %q, want %q %d and a message", r.Fence, r.Token, r.Msg, tt.fence, tt.token)
			}
			if got := r.Metadata["command"]; got != tt.command {
				t.Errorf("command: got %q, want %q (%v)", got, tt.command, err)
			}
		})
	}
	if n := db.Exists(t.Context(), key(fence, "a"), TokenKey(fence), TokenKey("other")).Val(); n != 0 {
		t.Errorf("keys after refusals: got %d, want none written", n)
	}
	_, err := backend.Exec(t.Context(), fence, 1, [][]string{{"SET", "plain", "1"}})
	if r := refusal(t, err, tokens.ReasonInvalidRequest); !contains(r.Msg, "{"+fence+"}") {
		t.Errorf("slot refusal: got %q, want it to name the hash tag {%s}", r.Msg, fence)
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub))
}

// TestCheckSlotsOffStillBindsKeys: the deprecated CheckSlots no longer
// lets keys without the fence's tag through.
func TestCheckSlotsOffStillBindsKeys(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.CheckSlots = false
	b := openBackend(t, cfg)
	fence := unique("noslots")
	for _, k := range []string{"untagged:" + fence, fence + ":other", TokenKey(fence)} {
		_, err := b.Exec(t.Context(), fence, 3, [][]string{{"SET", k, "1"}})
		refusal(t, err, tokens.ReasonInvalidRequest)
		if n := admin(t).Exists(t.Context(), k).Val(); k != TokenKey(fence) && n != 0 {
			t.Errorf("%s: got written, want nothing written", k)
		}
	}
	execOKOn(t, b, fence, 3, []string{"SET", key(fence, "a"), "1"})
}

func TestConfigAllowAddsKnownCommands(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Allow = []string{"rename", "ZPOPMIN"}
	b := openBackend(t, cfg)
	fence := unique("allow")
	res, err := b.Exec(t.Context(), fence, 1, [][]string{
		{"SET", key(fence, "a"), "1"},
		{"RENAME", key(fence, "a"), key(fence, "b")},
		{"GET", key(fence, "b")},
	})
	if err != nil || !reflect.DeepEqual(res, []any{"OK", "OK", "1"}) {
		t.Errorf("Exec with RENAME allowed: got %v, %v; want [OK OK 1], nil", res, err)
	}
	// A failing RENAME rolls back both of its keys.
	_, err = b.Exec(t.Context(), fence, 2, [][]string{
		{"SET", key(fence, "c"), "x"},
		{"RENAME", key(fence, "b"), key(fence, "d")},
		{"INCR", key(fence, "c")},
	})
	refusal(t, err, tokens.ReasonStatementFailed)
	got := admin(t).MGet(t.Context(), key(fence, "b"), key(fence, "c"), key(fence, "d")).Val()
	if !reflect.DeepEqual(got, []any{"1", nil, nil}) {
		t.Errorf("after rollback: got %v, want [1 <nil> <nil>]", got)
	}
	// The shared backend does not allow it.
	_, err = backend.Exec(t.Context(), fence, 3, [][]string{{"RENAME", key(fence, "b"), key(fence, "e")}})
	refusal(t, err, tokens.ReasonCommandNotAllowed)
}

func TestExecAllOrNothing(t *testing.T) {
	t.Parallel()
	db := admin(t)
	tests := []struct {
		name    string
		failing func(fence string) []string
		want    string // prefix of Redis's error text
	}{
		{"WRONGTYPE", func(f string) []string { return []string{"LPUSH", key(f, "str"), "x"} }, "WRONGTYPE"},
		{"INCR on a non-integer", func(f string) []string { return []string{"INCR", key(f, "str")} }, "ERR value is not an integer"},
		{"HINCRBY on a non-integer", func(f string) []string { return []string{"HINCRBY", key(f, "hash"), "f", "1"} }, "ERR hash value is not an integer"},
		{"LSET out of range", func(f string) []string { return []string{"LSET", key(f, "list"), "99", "x"} }, "ERR index out of range"},
		{"XADD with an old id", func(f string) []string { return []string{"XADD", key(f, "stream"), "1-1", "f", "v"} }, "ERR The ID specified in XADD"},
		{"SET with a bad option", func(f string) []string { return []string{"SET", key(f, "str"), "v", "EX", "-5"} }, "ERR invalid expire time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			fence := unique("atomic")
			execOK(t, fence, 3,
				[]string{"SET", key(fence, "str"), "orig", "PX", "600000"},
				[]string{"HSET", key(fence, "hash"), "f", "text", "g", "1"},
				[]string{"RPUSH", key(fence, "list"), "a", "b"},
				[]string{"PEXPIRE", key(fence, "list"), "900000"},
				[]string{"XADD", key(fence, "stream"), "5-1", "f", "v"},
				[]string{"SET", key(fence, "gone"), "bye"},
			)
			before := dump(t, db, fence)
			ttlStr, ttlList := db.PTTL(ctx, key(fence, "str")).Val(), db.PTTL(ctx, key(fence, "list")).Val()

			cmds := [][]string{
				{"SET", key(fence, "str"), "changed"},            // overwrite, drops the TTL
				{"PERSIST", key(fence, "list")},                  // drops a TTL
				{"RPUSH", key(fence, "list"), "c"},               // append
				{"HSET", key(fence, "hash"), "g", "2", "h", "3"}, // modify
				{"DEL", key(fence, "gone")},                      // delete
				{"SET", key(fence, "fresh"), "new", "EX", "100"}, // create
				{"XADD", key(fence, "stream"), "9-1", "f", "w"},  // stream entry
				{"INCR", key(fence, "counter")},                  // create
				{"GET", key(fence, "str")},                       // read only
				tt.failing(fence),
				{"SET", key(fence, "after"), "never"},
			}
			_, err := backend.Exec(ctx, fence, 100, cmds)
			r := refusal(t, err, tokens.ReasonStatementFailed)
			if got := r.Metadata["command"]; got != "9" {
				t.Errorf("command: got %q, want 9", got)
			}
			if got := r.Metadata["error"]; len(got) < len(tt.want) || got[:len(tt.want)] != tt.want {
				t.Errorf("error: got %q, want prefix %q", got, tt.want)
			}
			if !errors.Is(err, tokens.ErrStatementFailed) || r.Fence != fence || r.Token != 100 {
				t.Errorf("refusal: got %+v, want ErrStatementFailed with fence and token", r)
			}
			if after := dump(t, db, fence); !reflect.DeepEqual(after, before) {
				t.Errorf("state after the failed write:\n got %q\nwant %q", after, before)
			}
			if got := highWater(t, fence); got != 3 {
				t.Errorf("high-water: got %d, want 3 (not raised)", got)
			}
			for k, was := range map[string]time.Duration{key(fence, "str"): ttlStr, key(fence, "list"): ttlList} {
				got := db.PTTL(ctx, k).Val()
				if got <= 0 || got > was {
					t.Errorf("TTL of %s: got %v, want the one before (%v) or slightly less", k, got, was)
				}
			}
			if got := db.PTTL(ctx, key(fence, "hash")).Val(); got != -1 {
				t.Errorf("TTL of the hash: got %v, want none (-1)", got)
			}
		})
	}
}

func TestExecReplies(t *testing.T) {
	t.Parallel()
	fence := unique("replies")
	k := func(n string) string { return key(fence, n) }
	tests := []struct {
		cmd  []string
		want any
	}{
		{[]string{"SET", k("s"), "hello"}, "OK"},
		{[]string{"GET", k("s")}, "hello"},
		{[]string{"GET", k("missing")}, nil},
		{[]string{"SET", k("s"), "bye", "GET"}, "hello"},
		{[]string{"SETNX", k("s"), "x"}, int64(0)},
		{[]string{"INCRBY", k("n"), "41"}, int64(41)},
		{[]string{"INCR", k("n")}, int64(42)},
		{[]string{"INCRBYFLOAT", k("f"), "1.5"}, "1.5"},
		{[]string{"MGET", k("s"), k("missing"), k("n")}, []any{"bye", nil, "42"}},
		{[]string{"EXISTS", k("s"), k("missing")}, int64(1)},
		{[]string{"TYPE", k("s")}, "string"},
		{[]string{"TTL", k("s")}, int64(-1)},
		{[]string{"HSET", k("h"), "a", "1"}, int64(1)},
		{[]string{"HGETALL", k("h")}, []any{"a", "1"}},
		{[]string{"HMGET", k("h"), "a", "b"}, []any{"1", nil}},
		{[]string{"RPUSH", k("l"), "x", "y"}, int64(2)},
		{[]string{"LRANGE", k("l"), "0", "-1"}, []any{"x", "y"}},
		{[]string{"LRANGE", k("missing"), "0", "-1"}, []any{}},
		{[]string{"LPOP", k("missing")}, nil},
		{[]string{"SADD", k("set"), "m"}, int64(1)},
		{[]string{"SMEMBERS", k("set")}, []any{"m"}},
		{[]string{"ZADD", k("z"), "1.5", "m"}, int64(1)},
		{[]string{"ZSCORE", k("z"), "m"}, "1.5"},
		{[]string{"ZRANGE", k("z"), "0", "-1", "WITHSCORES"}, []any{"m", "1.5"}},
		{[]string{"XADD", k("x"), "7-1", "f", "v"}, "7-1"},
		{[]string{"XRANGE", k("x"), "-", "+"}, []any{[]any{"7-1", []any{"f", "v"}}}},
		{[]string{"DEL", k("s"), k("missing")}, int64(1)},
	}
	cmds := make([][]string, len(tests))
	for i, tt := range tests {
		cmds[i] = tt.cmd
	}
	res := execOK(t, fence, 1, cmds...)
	if len(res) != len(tests) {
		t.Fatalf("replies: got %d, want %d", len(res), len(tests))
	}
	for i, tt := range tests {
		if !reflect.DeepEqual(res[i], tt.want) {
			t.Errorf("%v: got %#v, want %#v", tt.cmd, res[i], tt.want)
		}
	}
	if _, err := json.Marshal(res); err != nil {
		t.Errorf("json.Marshal(replies): got %v, want nil", err)
	}
}

func TestExecAfterScriptFlush(t *testing.T) {
	t.Parallel()
	db := admin(t)
	fence := unique("flush")
	execOK(t, fence, 1, []string{"INCR", key(fence, "n")})
	for i := range 2 {
		if err := db.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		res := execOK(t, fence, 2, []string{"INCR", key(fence, "n")})
		if want := []any{int64(i + 2)}; !reflect.DeepEqual(res, want) {
			t.Errorf("after SCRIPT FLUSH: got %v, want %v", res, want)
		}
	}
	if exists := db.ScriptExists(t.Context(), script.Hash()).Val(); !reflect.DeepEqual(exists, []bool{true}) {
		t.Errorf("script cached after the fallback to EVAL: got %v, want [true]", exists)
	}
}

// TestConcurrentWritersNeverRegress is the safety property: however writers
// with different tokens interleave, the applied writes of a fence are in
// non-decreasing token order.
func TestConcurrentWritersNeverRegress(t *testing.T) {
	t.Parallel()
	for range 5 {
		ledgerRound(t, backend)
	}
}

func ledgerRound(t *testing.T, backend *Backend) {
	t.Helper()
	db := admin(t)
	fence := unique("ledger")
	ledger := key(fence, "ledger")
	const writers, writes = 8, 50
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		accepted int
		failures []error
	)
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for j := range writes {
				tok := tokens.Token(1 + 4*j + rng.IntN(20))
				_, err := backend.Exec(t.Context(), fence, tok, [][]string{
					{"RPUSH", ledger, tok.String()},
					{"INCR", key(fence, "count")},
				})
				mu.Lock()
				switch r, _ := tokens.AsRefusal(err); {
				case err == nil:
					accepted++
				case r != nil && r.Reason == tokens.ReasonStaleToken && r.HighWater > tok:
				default:
					failures = append(failures, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range failures {
		t.Errorf("Exec: got %v, want nil or STALE_TOKEN above the token", err)
	}
	entries, err := db.LRange(t.Context(), ledger, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var prev uint64
	for i, e := range entries {
		tok, _ := strconv.ParseUint(e, 10, 64)
		if tok < prev {
			t.Errorf("ledger entry %d: token %d applied after token %d", i, tok, prev)
		}
		prev = tok
	}
	if len(entries) != accepted {
		t.Errorf("ledger entries: got %d, want %d accepted writes", len(entries), accepted)
	}
	if n, _ := db.Get(t.Context(), key(fence, "count")).Int(); n != accepted {
		t.Errorf("count: got %d, want %d", n, accepted)
	}
	if hw := highWater(t, fence); uint64(hw) != prev {
		t.Errorf("high-water: got %d, want the last applied token %d", hw, prev)
	}
}

func TestExecCorruptTokenKey(t *testing.T) {
	t.Parallel()
	db := admin(t)
	fence := unique("corrupt")
	db.Set(t.Context(), TokenKey(fence), "not-a-token", 0)
	t.Cleanup(func() { db.Del(context.WithoutCancel(t.Context()), TokenKey(fence)) })
	if _, err := backend.Fences(t.Context()); err != nil {
		t.Errorf("Fences with a corrupt token key: got %v, want nil", err)
	}
	_, err := backend.Exec(t.Context(), fence, 5, [][]string{{"SET", key(fence, "a"), "1"}})
	r := refusal(t, err, tokens.ReasonBackendUnavailable)
	if _, ok := r.Metadata["outcome"]; ok {
		t.Errorf("outcome: got %q, want none (nothing written)", r.Metadata["outcome"])
	}
	if n := db.Exists(t.Context(), key(fence, "a")).Val(); n != 0 {
		t.Errorf("key written despite the corrupt token key")
	}
}

// TestServerRestartAndOutage restarts the shared server, so it does not
// run in parallel: parallel tests start after it.
func TestServerRestartAndOutage(t *testing.T) {
	ctx := t.Context()
	fence := unique("restart")
	execOK(t, fence, 1, []string{"SET", key(fence, "a"), "1"})

	// Restart: the data and the script cache are gone (no persistence).
	if err := server.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if exists := admin(t).ScriptExists(ctx, script.Hash()).Val(); !reflect.DeepEqual(exists, []bool{false}) {
		t.Fatalf("script cached after restart: got %v, want [false]", exists)
	}
	res := execOK(t, fence, 2, []string{"INCR", key(fence, "n")})
	if !reflect.DeepEqual(res, []any{int64(1)}) {
		t.Errorf("after restart: got %v, want [1]", res)
	}

	// The server stops answering writes while the script is queued: the
	// outcome is unknown.
	if err := admin(t).Do(ctx, "CLIENT", "PAUSE", "1000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := backend.Exec(short, fence, 3, [][]string{{"INCR", key(fence, "n")}})
	cancel()
	r := refusal(t, err, tokens.ReasonBackendUnavailable)
	if got := r.Metadata["outcome"]; got != "unknown" {
		t.Errorf("timed out write: got outcome %q, want unknown (%v)", got, err)
	}
	if err := admin(t).Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}

	// Down: nothing listens, so nothing was sent.
	if err := server.Kill(); err != nil {
		t.Fatal(err)
	}
	_, err = backend.Exec(ctx, fence, 4, [][]string{{"INCR", key(fence, "n")}})
	r = refusal(t, err, tokens.ReasonBackendUnavailable)
	if got, ok := r.Metadata["outcome"]; ok {
		t.Errorf("server down: got outcome %q, want none (%v)", got, err)
	}
	if _, _, err := backend.HighWater(ctx, fence); err == nil {
		t.Errorf("HighWater with the server down: got nil, want an error")
	}

	if err := server.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// go-redis counts failed dials over the pool's life and, once they
	// reach the pool size, fails every dial until a probe it makes once a
	// second gets through: with go test -count=N this outage can be the
	// one that trips it.
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, _, err := backend.HighWater(ctx, fence); err == nil || time.Now().After(deadline) {
			break
		}
	}
	execOK(t, fence, 5, []string{"INCR", key(fence, "n")})
	if got := highWater(t, fence); got != 5 {
		t.Errorf("high-water after restarts: got %d, want 5", got)
	}
}

func TestExecAfterClose(t *testing.T) {
	t.Parallel()
	b, err := Open(t.Context(), server.Addr(), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	fence := unique("closed")
	_, err = b.Exec(t.Context(), fence, 1, [][]string{{"GET", key(fence, "a")}})
	r := refusal(t, err, tokens.ReasonBackendUnavailable)
	if got, ok := r.Metadata["outcome"]; ok {
		t.Errorf("closed backend: got outcome %q, want none (%v)", got, err)
	}
}

// TestCommandIsExecsWrite sends Command's EVALSHA itself and finds Exec's
// outcome: the write applied and the mark raised, then a stale token
// refused with nothing written.
func TestCommandIsExecsWrite(t *testing.T) {
	ctx := t.Context()
	db := admin(t)
	fence := unique("command")
	execOK(t, fence, 5, []string{"SET", key(fence, "a"), "1"}) // caches the script

	send := func(tok tokens.Token, v string) any {
		t.Helper()
		cmd, err := backend.Command(fence, tok, [][]string{{"set", key(fence, "a"), v}})
		if err != nil {
			t.Fatalf("Command: %v", err)
		}
		if cmd[0] != "EVALSHA" || cmd[1] != script.Hash() {
			t.Fatalf("Command: got %q, want EVALSHA %s …", cmd[:2], script.Hash())
		}
		args := make([]any, len(cmd))
		for i, a := range cmd {
			args[i] = a
		}
		res, err := db.Do(ctx, args...).Result()
		if err != nil {
			t.Fatalf("%q: %v", cmd, err)
		}
		return res
	}
	if got, want := send(9, "2"), []any{int64(replyOK), "OK"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("token 9: got %#v, want %#v", got, want)
	}
	if hw := highWater(t, fence); hw != 9 {
		t.Fatalf("high-water: got %d, want 9", hw)
	}
	if got, want := send(7, "3"), []any{int64(replyStale), "9"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("token 7: got %#v, want %#v", got, want)
	}
	if v := db.Get(ctx, key(fence, "a")).Val(); v != "2" {
		t.Fatalf("value: got %q, want 2", v)
	}
	if _, err := backend.Command(fence, 9, [][]string{{"BLPOP", key(fence, "a"), "0"}}); err == nil {
		t.Fatal("Command of BLPOP: got nil, want a refusal")
	} else {
		refusal(t, err, tokens.ReasonCommandNotAllowed)
	}
}

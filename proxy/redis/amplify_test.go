package redis

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/proxy/redis/throwaway"
	"github.com/fencegate/fencegate/tokens"
)

// TestRepeatedElementsWeighedBeforeSending: a read whose reply repeats
// elements (MGET naming a key again, HMGET a field, SRANDMEMBER or
// HRANDFIELD with a negative count) is weighed before sending at
// MaxValueBytes plus 16 bytes per repeat, and refused past
// MaxReplyBytes; with the defaults (1 MiB, 4 MiB) that is three repeats.
// Distinct names and positive counts are bounded by the keys and pass.
func TestRepeatedElementsWeighedBeforeSending(t *testing.T) {
	small := DefaultConfig()
	small.MaxValueBytes = 1 << 10 // 4 MiB / (1 KiB + 16): 4032 repeats
	f := unique("repeats")
	k := key(f, "k")
	times := func(prefix []string, name string, n int) []string {
		return append(slices.Clone(prefix), slices.Repeat([]string{name}, n)...)
	}
	distinct := []string{"MGET"}
	for i := range maxArgs - 1 {
		distinct = append(distinct, key(f, strconv.Itoa(i)))
	}
	// More than keySetLinear names, three of them repeats.
	manyWithRepeats := append(slices.Clone(distinct[:40]), distinct[1], distinct[2], distinct[1])
	for _, tc := range []struct {
		name   string
		cfg    Config
		cmd    []string
		refuse bool
	}{
		{"MGET three repeats", DefaultConfig(), times([]string{"MGET"}, k, 4), false},
		{"MGET four repeats", DefaultConfig(), times([]string{"MGET"}, k, 5), true},
		{"MGET many names three repeats", DefaultConfig(), manyWithRepeats, false},
		{"MGET many names four repeats", DefaultConfig(), append(slices.Clone(manyWithRepeats), distinct[3]), true},
		{"MGET 4095 distinct keys", DefaultConfig(), distinct, false},
		{"MGET 4095 times one key", DefaultConfig(), times([]string{"MGET"}, k, maxArgs-1), true},
		{"MGET small values many repeats", small, times([]string{"MGET"}, k, 4033), false},
		{"HMGET three repeats", DefaultConfig(), times([]string{"HMGET", k}, "f", 4), false},
		{"HMGET four repeats", DefaultConfig(), times([]string{"HMGET", k}, "f", 5), true},
		{"HMGET key is not a field", DefaultConfig(), []string{"HMGET", k, k, "f", "f", "f", "f"}, false},
		{"HMGET distinct fields", DefaultConfig(), []string{"HMGET", k, "a", "b", "c", "d", "e", "f", "g"}, false},
		{"SRANDMEMBER -3", DefaultConfig(), []string{"SRANDMEMBER", k, "-3"}, false},
		{"SRANDMEMBER -4", DefaultConfig(), []string{"SRANDMEMBER", k, "-4"}, true},
		{"SRANDMEMBER -100 small values", small, []string{"SRANDMEMBER", k, "-100"}, false},
		{"SRANDMEMBER 1000000", DefaultConfig(), []string{"SRANDMEMBER", k, "1000000"}, false},
		{"SRANDMEMBER min int64", DefaultConfig(), []string{"SRANDMEMBER", k, "-9223372036854775808"}, true},
		{"HRANDFIELD -3", DefaultConfig(), []string{"HRANDFIELD", k, "-3"}, false},
		{"HRANDFIELD -4", DefaultConfig(), []string{"HRANDFIELD", k, "-4"}, true},
		{"HRANDFIELD -1 WITHVALUES", DefaultConfig(), []string{"HRANDFIELD", k, "-1", "WITHVALUES"}, false},
		{"HRANDFIELD -2 WITHVALUES", DefaultConfig(), []string{"HRANDFIELD", k, "-2", "WITHVALUES"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Allow = []string{"SRANDMEMBER", "HRANDFIELD"}
			b := openBackend(t, tc.cfg)
			var p plan
			r := b.planOf(&p, f, 5, [][]string{{"SET", key(f, "a"), "1"}, tc.cmd})
			switch {
			case tc.refuse && (r == nil || r.Reason != tokens.ReasonInvalidRequest ||
				r.Metadata["limit"] != "MaxReplyBytes" || r.Metadata["command"] != "1"):
				t.Errorf("%.80q: got %v; want INVALID_REQUEST, command 1, limit MaxReplyBytes", tc.cmd, r)
			case !tc.refuse && r != nil:
				t.Errorf("%.80q: got %v; want accepted", tc.cmd, r)
			}
		})
	}
}

// TestRepeatedElementsWithinLimitRun: repeats within the limit reach
// Redis and answer as Redis does.
func TestRepeatedElementsWithinLimitRun(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Allow = []string{"SRANDMEMBER"}
	b := openBackend(t, cfg)
	f := unique("repeatsrun")
	s, h, set := key(f, "s"), key(f, "h"), key(f, "set")
	execOKOn(t, b, f, 5, []string{"SET", s, "v"}, []string{"HSET", h, "f", "w"}, []string{"SADD", set, "m"})
	res := execOKOn(t, b, f, 5,
		[]string{"MGET", s, s, key(f, "missing"), s, s},
		[]string{"HMGET", h, "f", "f", "f", "f"},
		[]string{"SRANDMEMBER", set, "-3"})
	want := [][]any{{"v", "v", nil, "v", "v"}, {"w", "w", "w", "w"}, {"m", "m", "m"}}
	for i, w := range want {
		if got, _ := res[i].([]any); !slices.Equal(got, w) {
			t.Errorf("command %d: got %q, want %q", i, res[i], w)
		}
	}
}

// TestRepeatedArgumentsDoNotAmplify: no allowed read, its names or
// elements repeated as often as a command may have arguments, makes
// Redis build much more than MaxReplyBytes beyond its keys. MGET, HMGET,
// SRANDMEMBER and HRANDFIELD would build 1024 copies of a value (64 MiB
// here) and are refused before sending; the others' replies are bounded
// by their keys (SINTER, SUNION, SDIFF of one set named 1024 times), are
// integers or scores (SMISMEMBER, ZMSCORE, EXISTS, LPOS), or are the
// value itself (GETRANGE). Measured as the rise of Redis's
// used_memory_peak, on a server of its own per command.
func TestRepeatedArgumentsDoNotAmplify(t *testing.T) {
	const (
		limit = 64 << 10
		times = 1024
	)
	// Room for the request itself (its arguments, as Redis's objects and
	// the script's), which the rise also counts.
	const bound = 4*limit + limit
	f := unique("amplify")
	s, h, set, z, l := key(f, "s"), key(f, "h"), key(f, "set"), key(f, "z"), key(f, "l")
	rep := func(prefix []string, arg string) []string {
		return append(slices.Clone(prefix), slices.Repeat([]string{arg}, times)...)
	}
	for _, tc := range []struct {
		name    string
		cmd     []string
		refused bool // before sending, for the MaxReplyBytes limit
	}{
		{"MGET", rep([]string{"MGET"}, s), true},
		{"HMGET", rep([]string{"HMGET", h}, "f0"), true},
		{"SRANDMEMBER", []string{"SRANDMEMBER", set, "-" + strconv.Itoa(times)}, true},
		{"HRANDFIELD", []string{"HRANDFIELD", h, "-" + strconv.Itoa(times)}, true},
		{"HRANDFIELD WITHVALUES", []string{"HRANDFIELD", h, "-" + strconv.Itoa(times), "WITHVALUES"}, true},
		{"SINTER", rep([]string{"SINTER"}, set), false},
		{"SUNION", rep([]string{"SUNION"}, set), false},
		{"SDIFF", rep([]string{"SDIFF"}, set), false},
		{"SMISMEMBER", rep([]string{"SMISMEMBER", set}, "x"), false},
		{"ZMSCORE", rep([]string{"ZMSCORE", z}, "m"), false},
		{"EXISTS", rep([]string{"EXISTS"}, s), false},
		{"LPOS", []string{"LPOS", l, "e", "COUNT", "0"}, false},
		{"GETRANGE", []string{"GETRANGE", s, "0", "-1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A server of its own, so that its memory peak is this write's.
			srv, err := throwaway.Start(t.Context(), throwaway.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close() })
			cfg := DefaultConfig()
			cfg.MaxValueBytes, cfg.MaxReplyBytes = limit, limit
			cfg.Allow = []string{"SRANDMEMBER", "HRANDFIELD", "SINTER", "SUNION", "SDIFF", "SMISMEMBER", "ZMSCORE", "LPOS"}
			b, err := Open(t.Context(), srv.Addr(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			db := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true})
			t.Cleanup(func() { _ = db.Close() })

			// Each key about one value's worth, 64 KiB, written 1 KiB at a
			// time so that the setup leaves the peak near used memory.
			elem := strings.Repeat("e", 1<<10)
			for i := range limit >> 10 {
				n := strconv.Itoa(i)
				for _, c := range [][]any{
					{"APPEND", s, elem},
					{"HSET", h, "f" + n, elem},
					{"SADD", set, n + elem},
					{"ZADD", z, i, n + elem},
					{"RPUSH", l, "e"},
				} {
					if err := db.Do(t.Context(), c...).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := db.ZAdd(t.Context(), z, goredis.Z{Score: 1.5, Member: "m"}).Err(); err != nil {
				t.Fatal(err)
			}

			// The script loaded, and the connections made, before the peak.
			execOKOn(t, b, f, 5, []string{"EXISTS", s})
			peak0 := rt21Peak(t, db)
			_, err = b.Exec(t.Context(), f, 5, [][]string{tc.cmd})
			rise := rt21Peak(t, db) - peak0
			r, _ := tokens.AsRefusal(err)
			if tc.refused && (r == nil || r.Reason != tokens.ReasonInvalidRequest || r.Metadata["limit"] != "MaxReplyBytes") {
				t.Errorf("%s: got %.160v; want INVALID_REQUEST, limit MaxReplyBytes", tc.name, err)
			}
			if rise > bound {
				t.Errorf("%s: Redis's used_memory_peak rose by %d KiB (MaxReplyBytes %d KiB, bound %d KiB); the write got %.160v",
					tc.name, rise>>10, limit>>10, bound>>10, err)
			}
			t.Logf("%s: used_memory_peak rose by %d KiB; %.100v", tc.name, rise>>10, err)
		})
	}
}

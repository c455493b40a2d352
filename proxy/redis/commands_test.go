package redis

import (
	"slices"
	"strings"
	"testing"
)

// TestCommandTableMatchesServer compares the table with what the server
// reports in COMMAND INFO, so a wrong arity or key position (a key the
// slot check or the rollback would miss) shows.
func TestCommandTableMatchesServer(t *testing.T) {
	t.Parallel()
	// Newer servers accept more arguments than 7.0 reports.
	laxer := map[string]int{"ZRANK": 3, "ZREVRANK": 3}
	cmds, err := admin(t).Command(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range commandTable {
		c, ok := cmds[strings.ToLower(name)]
		if !ok {
			t.Errorf("%s: not known to the server", name)
			continue
		}
		arity := int(c.Arity)
		if a, ok := laxer[name]; ok && int(c.Arity) == a {
			arity = s.arity
		}
		if arity != s.arity || int(c.FirstKeyPos) != s.first || int(c.LastKeyPos) != s.last || int(c.StepCount) != s.step {
			t.Errorf("%s: got arity %d keys %d..%d step %d in the table, server says %d %d..%d step %d",
				name, s.arity, s.first, s.last, s.step, c.Arity, c.FirstKeyPos, c.LastKeyPos, c.StepCount)
		}
		if isWrite := slices.Contains(c.Flags, "write"); isWrite != s.write {
			t.Errorf("%s: got write %v in the table, server says %v (flags %v)", name, s.write, isWrite, c.Flags)
		}
	}
}

func TestDefaultAllowlist(t *testing.T) {
	t.Parallel()
	a, err := newAllowlist(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields(`GET SET SETNX SETEX PSETEX GETSET GETDEL GETEX MGET MSET MSETNX APPEND INCR
		INCRBY INCRBYFLOAT DECR DECRBY STRLEN SETRANGE GETRANGE DEL UNLINK EXISTS EXPIRE PEXPIRE
		EXPIREAT PEXPIREAT PERSIST TTL PTTL TYPE HSET HSETNX HGET HMGET HMSET HDEL HINCRBY
		HINCRBYFLOAT HGETALL HEXISTS HLEN HKEYS HVALS LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP LLEN
		LRANGE LINDEX LSET LREM LTRIM LINSERT LMOVE SADD SREM SISMEMBER SMEMBERS SCARD SPOP SMOVE
		ZADD ZREM ZINCRBY ZSCORE ZCARD ZRANGE ZRANGEBYSCORE ZREMRANGEBYSCORE ZREMRANGEBYRANK ZRANK
		ZCOUNT XADD XLEN XRANGE XTRIM XDEL`)
	if len(a) != len(want) {
		t.Errorf("default allowlist: got %d commands, want %d", len(a), len(want))
	}
	for _, n := range want {
		if _, ok := a.lookup(strings.ToLower(n)); !ok {
			t.Errorf("%s: got not allowed, want allowed", n)
		}
	}
}

// TestLookupIsASCIIOnly: command names match in any ASCII case, as Redis
// matches them, and only so: strings.ToUpper maps U+017F (ſ) to S, and
// Redis answers "unknown command" to "ſet".
func TestLookupIsASCIIOnly(t *testing.T) {
	t.Parallel()
	a, err := newAllowlist([]string{"sinter"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		want bool
	}{
		{"SET", true},
		{"set", true},
		{"sEt", true},
		{"SInter", true},
		{"ſet", false},
		{"ſET", false},
		{"ſinter", false},
		{"ſpop", false},
		{"hſet", false},
	}
	for _, tt := range tests {
		if _, got := a.lookup(tt.name); got != tt.want {
			t.Errorf("lookup(%q): got %v, want %v", tt.name, got, tt.want)
		}
	}
	if _, err := newAllowlist([]string{"ſinter"}); err == nil {
		t.Errorf(`newAllowlist("ſinter"): got nil, want an unknown command`)
	}
	for in, want := range map[string]string{"": "", "SET": "SET", "set": "SET", "ſet": "ſET", "zRangeByScore": "ZRANGEBYSCORE"} {
		if got := upperASCII(in); got != want {
			t.Errorf("upperASCII(%q): got %q, want %q", in, got, want)
		}
	}
}

package resp_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/api/auth/authtest"
	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/policy"
	"github.com/fencegate/fencegate/proxy/redis"
)

// The red team's attacks on the RESP listener. Each asserts the safe
// outcome: a failing test is a hole.

// reply reads one whole reply and renders it as text: "+OK", "-ERR ...",
// ":1", "$v" for a bulk string (with its contents), "$nil", "*[a b]".
func (r *raw) reply() string {
	r.t.Helper()
	l := r.line()
	if l == "" {
		r.t.Fatal("empty reply line")
	}
	switch l[0] {
	case '$':
		n, err := strconv.Atoi(l[1:])
		if err != nil {
			r.t.Fatalf("bad bulk header %q", l)
		}
		if n < 0 {
			return "$nil"
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(r, buf); err != nil {
			r.t.Fatal(err)
		}
		return "$" + string(buf[:n])
	case '*', '%', '~', '>':
		n, err := strconv.Atoi(l[1:])
		if err != nil {
			r.t.Fatalf("bad aggregate header %q", l)
		}
		if n < 0 {
			return "*nil"
		}
		if l[0] == '%' {
			n *= 2
		}
		parts := make([]string, n)
		for i := range parts {
			parts[i] = r.reply()
		}
		return "*[" + strings.Join(parts, " ") + "]"
	}
	return l
}

func ioReadFull(r *raw, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.br.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// wantReply reads one reply and checks it starts with prefix.
func (r *raw) wantReply(what, prefix string) string {
	r.t.Helper()
	got := r.reply()
	if !strings.HasPrefix(got, prefix) {
		r.t.Errorf("%s: got reply %.200q, want %q...", what, got, prefix)
	}
	return got
}

// dbState is every key of the Redis behind the listener with its DUMP and
// whether it has an expiry: what an attack must leave as it was.
func dbState(t *testing.T, e *env) map[string]string {
	t.Helper()
	ctx := t.Context()
	keys, err := e.admin.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	// One round trip for all: the package's Redis holds every earlier
	// test's keys.
	pipe := e.admin.Pipeline()
	dumps := make([]*goredis.StringCmd, len(keys))
	ttls := make([]*goredis.DurationCmd, len(keys))
	for i, k := range keys {
		dumps[i], ttls[i] = pipe.Dump(ctx, k), pipe.PTTL(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		t.Fatal(err)
	}
	m := map[string]string{}
	for i, k := range keys {
		d, err := dumps[i].Result()
		if errors.Is(err, goredis.Nil) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		m[k] = fmt.Sprintf("%x ttl=%v", d, ttls[i].Val() > 0)
	}
	return m
}

// sameState reports the keys that differ between two dbStates, skipping
// those for which skip is true.
func sameState(t *testing.T, what string, before, after map[string]string, skip func(string) bool) {
	t.Helper()
	var diffs []string
	for k, v := range before {
		if skip != nil && skip(k) {
			continue
		}
		if after[k] != v {
			diffs = append(diffs, fmt.Sprintf("%q changed", k))
		}
	}
	for k := range after {
		if skip != nil && skip(k) {
			continue
		}
		if _, ok := before[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%q created", k))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("%s: Redis changed: %s", what, strings.Join(diffs, ", "))
	}
}

func authRaw(t *testing.T, e *env, fence string, tok uint64) *raw {
	t.Helper()
	r := e.raw(t)
	r.send(cmd("AUTH", fence, strconv.FormatUint(tok, 10)))
	r.want("+OK")
	return r
}

// TestRedTeamForeignAndRefused: commands that take keys in non-key
// positions, reach other fences, fencegate's own keys, or are not on the
// allowlist are refused; nothing in Redis changes and no foreign value
// is echoed back.
func TestRedTeamForeignAndRefused(t *testing.T) {
	e := newEnv(t, resp.Config{})
	ctx := t.Context()
	f := unique("rtf")
	g := unique("rtg")
	tok, _ := e.lead(t, f)
	gtok, _ := e.lead(t, g)
	F := func(s string) string { return "{" + f + "}:" + s }
	G := func(s string) string { return "{" + g + "}:" + s }
	// G's data, written as G's leader, and some untagged data.
	rg := authRaw(t, e, g, gtok)
	rg.send(cmd("SET", G("secret"), "gsecret") + cmd("RPUSH", G("l"), "3", "1", "2") +
		cmd("SADD", G("s"), "m") + cmd("ZADD", G("z"), "1", "a") + cmd("XADD", G("st"), "*", "f", "v") +
		cmd("HSET", G("h"), "f", "v"))
	for range 6 {
		rg.wantReply("G setup", "")
	}
	for k, v := range map[string]string{"plain": "pv", "w_gsecret": "x", "objkey": "o"} {
		if err := e.admin.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r := authRaw(t, e, f, tok)
	r.send(cmd("SET", F("a"), "1") + cmd("RPUSH", F("l"), "3", "1", "2") + cmd("SADD", F("s"), "m") +
		cmd("ZADD", F("z"), "1", "a") + cmd("XADD", F("st"), "*", "f", "v") + cmd("SET", F("str"), "abc"))
	for range 6 {
		r.wantReply("F setup", "")
	}
	before := dbState(t, e)
	tk := "fencegate:{" + f + "}:token"
	gtk := "fencegate:{" + g + "}:token"
	for _, c := range [][]string{
		// keys in non-key positions
		{"SORT", F("l"), "BY", G("*"), "GET", G("*"), "STORE", G("out")},
		{"SORT", F("l"), "GET", "plain"},
		{"SORT_RO", F("l"), "BY", "w_*"},
		{"sort", F("l"), "STORE", F("out")},
		{"GEOADD", F("geo"), "13.36", "38.11", "p"},
		{"GEORADIUS", F("geo"), "15", "37", "200", "km", "STORE", G("geo")},
		{"GEOSEARCHSTORE", G("geo"), F("geo"), "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km"},
		{"XREADGROUP", "GROUP", "g", "c", "STREAMS", G("st"), ">"},
		{"XREAD", "STREAMS", G("st"), "0"},
		{"XGROUP", "CREATE", G("st"), "g", "$", "MKSTREAM"},
		{"XINFO", "STREAM", G("st")},
		{"XCLAIM", G("st"), "g", "c", "0", "0-1"},
		{"XAUTOCLAIM", G("st"), "g", "c", "0", "0"},
		{"XACK", G("st"), "g", "0-1"},
		{"XSETID", G("st"), "99999999999-0"},
		{"BITOP", "AND", F("dest"), G("secret")},
		{"BITOP", "NOT", G("secret"), F("str")},
		{"BITFIELD", G("secret"), "SET", "u8", "0", "255"},
		{"BITFIELD_RO", G("secret"), "GET", "u8", "0"},
		{"ZUNIONSTORE", F("dst"), "2", F("z"), G("z")},
		{"ZUNIONSTORE", F("dst"), "1", F("z"), G("z")},
		{"ZINTERSTORE", G("z"), "1", F("z")},
		{"ZDIFFSTORE", F("dst"), "1", G("z")},
		{"ZUNION", "2", F("z"), G("z")},
		{"ZINTERCARD", "1", G("z")},
		{"SINTERCARD", "1", G("s")},
		{"SUNIONSTORE", F("dst"), F("s"), G("s")},
		{"SINTERSTORE", G("s"), F("s")},
		{"SDIFF", F("s"), G("s")},
		{"SINTER", G("s")},
		{"SMOVE", F("s"), G("s"), "m"},
		{"SMOVE", G("s"), F("s"), "m"},
		{"LMOVE", F("l"), G("l"), "LEFT", "LEFT"},
		{"LMOVE", G("l"), F("l"), "LEFT", "LEFT"},
		{"RPOPLPUSH", G("l"), F("l")},
		{"LMPOP", "1", G("l"), "LEFT"},
		{"ZMPOP", "1", G("z"), "MIN"},
		{"BLMPOP", "0.01", "1", G("l"), "LEFT"},
		{"BZPOPMIN", G("z"), "0.01"},
		{"RENAME", F("a"), G("a")},
		{"RENAMENX", F("a"), G("a")},
		{"COPY", G("secret"), F("copy")},
		{"COPY", F("a"), G("copy")},
		{"COPY", F("a"), F("copy"), "DB", "1"},
		{"MOVE", F("a"), "1"},
		{"SWAPDB", "0", "1"},
		{"MIGRATE", "127.0.0.1", "1", "", "0", "1000", "KEYS", G("secret")},
		{"RESTORE", F("r"), "0", "x"},
		{"DUMP", G("secret")},
		{"OBJECT", "ENCODING", G("secret")},
		{"OBJECT", "FREQ", "plain"},
		{"MEMORY", "USAGE", G("secret")},
		{"DEBUG", "SLEEP", "0"},
		{"DEBUG", "OBJECT", G("secret")},
		{"MODULE", "LIST"},
		{"CONFIG", "SET", "maxmemory", "1"},
		{"CONFIG", "GET", "*"},
		{"ACL", "WHOAMI"},
		{"SCRIPT", "FLUSH"},
		{"EVAL", "return redis.call('GET', KEYS[1])", "1", G("secret")},
		{"EVALSHA", "0000000000000000000000000000000000000000", "0"},
		{"EVAL_RO", "return 1", "0"},
		{"FCALL", "f", "0"},
		{"FUNCTION", "FLUSH"},
		{"PUBLISH", "ch", "m"},
		{"SPUBLISH", "ch", "m"},
		{"PFADD", F("hll"), "a"},
		{"PFMERGE", F("hll"), G("hll")},
		{"PFCOUNT", G("hll")},
		{"LCS", F("str"), G("secret")},
		{"TOUCH", G("secret")},
		{"KEYS", "*"},
		{"SCAN", "0"},
		{"RANDOMKEY"},
		{"DBSIZE"},
		{"FLUSHDB"},
		{"SUBSTR", G("secret"), "0", "-1"},
		{"GETSET", G("secret"), "x"},
		{"EXPIRETIME", G("secret")},
		{"HSCAN", G("h"), "0"},
		{"SSCAN", G("s"), "0"},
		{"WAIT", "0", "0"},
		{"LATENCY", "RESET"},
		{"SLOWLOG", "RESET"},
		{"SHUTDOWN", "NOSAVE"},
		{"REPLICAOF", "127.0.0.1", "1"},
		// other fences and untagged keys in key positions
		{"GET", G("secret")},
		{"GETEX", G("secret"), "PERSIST"},
		{"GETDEL", G("secret")},
		{"SET", G("secret"), "x", "GET"},
		{"MGET", F("a"), G("secret")},
		{"MSET", F("a"), "1", G("secret"), "x"},
		{"MSETNX", F("a2"), "1", "plain", "x"},
		{"DEL", F("a"), G("secret")},
		{"EXISTS", G("secret")},
		{"TYPE", G("secret")},
		{"TTL", G("secret")},
		{"STRLEN", G("secret")},
		{"GETRANGE", G("secret"), "0", "-1"},
		{"LRANGE", G("l"), "0", "-1"},
		{"SMEMBERS", G("s")},
		{"ZRANGE", G("z"), "0", "-1"},
		{"XRANGE", G("st"), "-", "+"},
		{"HGETALL", G("h")},
		{"EXPIRE", G("secret"), "1"},
		{"PERSIST", G("secret")},
		{"APPEND", "plain", "x"},
		{"INCR", "{}" + F("n")},
		{"INCR", "{{" + f + "}}:n"},
		{"INCR", "{" + f},
		{"INCR", f + "}:n"},
		{"INCR", "{ " + f + "}:n"},
		{"INCR", "{" + f + " }:n"},
		{"INCR", "{" + strings.ToUpper(f) + "}:n"},
		{"INCR", "{" + f + "\x00}:n"},
		{"INCR", "{" + f + "-x}:n"},
		{"INCR", "{" + f + ".}:n"},
		{"INCR", "{" + f + "\u200b}:n"},
		// fencegate's own keys
		{"GET", tk},
		{"SET", tk, "1"},
		{"DEL", tk},
		{"EXPIRE", tk, "1"},
		{"INCR", tk},
		{"MSET", F("a"), "1", tk, "1"},
		{"MSET", F("a"), "1", gtk, "1"},
		{"DEL", F("a"), tk},
		{"LMOVE", F("l"), tk, "LEFT", "LEFT"},
		{"SET", "fencegate:" + F("x"), "1"},
		{"SET", gtk, "1"},
		// unicode command names that upper-case to refused ones
		{"evaſha", "0000000000000000000000000000000000000000", "0"},
		{"ſcript", "FLUSH"},
		{"ſort", F("l"), "STORE", G("out")},
		{"ſwapdb", "0", "1"},
		{"ſelect", "1"},
		{"multı"},
		{"SET\x00", F("a"), "1"},
		{"SET", F("a")},
	} {
		r.send(cmd(c...))
		got := r.reply()
		if !strings.HasPrefix(got, "-") {
			t.Errorf("%q: got %.200q, want an error", c, got)
		}
		for _, secret := range []string{"gsecret", "pv"} {
			if strings.Contains(got, secret) {
				t.Errorf("%q: reply %q leaks a foreign value", c, got)
			}
		}
	}
	after := dbState(t, e)
	sameState(t, "refused commands", before, after, nil)
	if l, _ := e.admin.LLen(ctx, G("l")).Result(); l != 3 {
		t.Errorf("G's list length %d, want 3", l)
	}
	r.send(cmd("PING"))
	r.want("+PONG")
}

// TestRedTeamTokenForms: tokens that are not the canonical decimal of the
// current term are refused at AUTH or at the write, and nothing is written
// with them: leading zeros, signs, spaces, other digits, values around
// 2^63 and 2^64, the stale and the next term.
func TestRedTeamTokenForms(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("rttok")
	old, cur := e.succession(t, f)
	c := strconv.FormatUint(cur, 10)
	o := strconv.FormatUint(old, 10)
	k := "{" + f + "}:k"
	// The current leader writes once so that the mark is cur.
	r := authRaw(t, e, f, cur)
	r.send(cmd("SET", k, "leader"))
	r.want("+OK")
	before := dbState(t, e)
	for _, tok := range []string{
		"0" + c, "00" + c, "+" + c, "-" + c, " " + c, c + " ", c + "\x00", c + "\r", "\t" + c,
		c + ".0", c + "e0", "0x" + strconv.FormatUint(cur, 16), "\uff11",
		strings.Repeat("0", 30) + c, o, "0" + o,
		strconv.FormatUint(cur+1, 10), strconv.FormatUint(cur+100, 10),
		"9223372036854775807", "9223372036854775808", "18446744073709551615", "18446744073709551616",
		"99999999999999999999", "999999999999999999999", "-1", "0", "",
		c + c,
	} {
		for _, via := range []string{"AUTH", "HELLO"} {
			x := e.raw(t)
			if via == "AUTH" {
				x.send(cmd("AUTH", f, tok))
			} else {
				x.send(cmd("HELLO", "2", "AUTH", f, tok))
			}
			x.reply()
			x.send(cmd("SET", k, "zombie:"+tok) + cmd("MULTI") + cmd("SET", k, "tx:"+tok) + cmd("EXEC"))
			for range 4 {
				x.reply()
			}
			x.send(cmd("GET", k))
			if got := x.reply(); got == "$leader" || got == "$zombie:"+tok || got == "$tx:"+tok {
				// A read with a refused token is still a fenced command.
				if tok != c {
					t.Errorf("%s token %q: GET answered %q, want a refusal", via, tok, got)
				}
			}
		}
	}
	sameState(t, "odd tokens", before, dbState(t, e), nil)
	if got := e.stored(t, k); got != "leader" {
		t.Errorf("key: %q, want leader", got)
	}
	if got := e.stored(t, "fencegate:{"+f+"}:token"); got != c {
		t.Errorf("token key: %q, want %s", got, c)
	}
}

// TestRedTeamAuthSwitching: AUTH, HELLO AUTH and RESET between pipelined
// commands and around MULTI never let a command run with another token
// than the one in force when it was sent, and a refused switch mid-MULTI
// aborts the transaction.
func TestRedTeamAuthSwitching(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("rtsw")
	g := unique("rtsw")
	old, cur := e.succession(t, f)
	gtok, _ := e.lead(t, g)
	c, o, gt := strconv.FormatUint(cur, 10), strconv.FormatUint(old, 10), strconv.FormatUint(gtok, 10)
	F := func(s string) string { return "{" + f + "}:" + s }
	G := func(s string) string { return "{" + g + "}:" + s }
	r := e.raw(t)
	// One packet: the server batches consecutive data commands; the AUTHs
	// between them must split the batches.
	r.send(cmd("AUTH", f, c) + cmd("SET", F("a"), "1") + cmd("SET", F("a2"), "1") +
		cmd("AUTH", f, o) + cmd("SET", F("b"), "1") + cmd("INCR", F("b2")) +
		cmd("HELLO", "2", "AUTH", f, c) + cmd("SET", F("c"), "1") +
		cmd("HELLO", "3", "AUTH", f, o) + cmd("SET", F("d"), "1") +
		cmd("AUTH", g, gt) + cmd("SET", F("e"), "1") + cmd("SET", G("e"), "1") +
		cmd("AUTH", f, o) + cmd("MULTI") + cmd("SET", F("m1"), "1") + cmd("EXEC") +
		cmd("AUTH", f, c) + cmd("MULTI") + cmd("SET", F("m2"), "1") + cmd("AUTH", f, o) + cmd("EXEC") +
		cmd("AUTH", f, o) + cmd("MULTI") + cmd("SET", F("m3"), "1") + cmd("AUTH", f, c) + cmd("EXEC") +
		cmd("AUTH", f, o) + cmd("MULTI") + cmd("SET", F("m4"), "1") + cmd("HELLO", "2", "AUTH", f, c) + cmd("EXEC") +
		cmd("AUTH", f, c) + cmd("MULTI") + cmd("SET", F("m5"), "1") + cmd("RESET") + cmd("EXEC") + cmd("SET", F("m5b"), "1") +
		cmd("AUTH", f, o) + cmd("MULTI") + cmd("SET", F("m6"), "1") + cmd("RESET") + cmd("AUTH", f, c) + cmd("EXEC"))
	for _, want := range []string{
		"+OK", "+OK", "+OK",
		"+OK", "-STALE_TOKEN", "-STALE_TOKEN",
		"*", "+OK",
		"", "-STALE_TOKEN", // HELLO 3 answers a map
		"+OK", "-INVALID_REQUEST", "+OK",
		"+OK", "+OK", "+QUEUED", "-STALE_TOKEN",
		"+OK", "+OK", "+QUEUED", "-ERR fencegate: AUTH inside MULTI", "-EXECABORT",
		"+OK", "+OK", "+QUEUED", "-ERR fencegate: AUTH inside MULTI", "-EXECABORT",
		"+OK", "+OK", "+QUEUED", "-ERR fencegate: HELLO inside MULTI", "-EXECABORT",
		"+OK", "+OK", "+QUEUED", "+RESET", "-ERR EXEC without MULTI", "-NOAUTH",
		"+OK", "+OK", "+QUEUED", "+RESET", "+OK", "-ERR EXEC without MULTI",
	} {
		r.wantReply("switching", want)
	}
	for k, want := range map[string]string{
		F("a"): "1", F("a2"): "1", F("b"): "", F("b2"): "", F("c"): "1", F("d"): "", F("e"): "", G("e"): "1",
		F("m1"): "", F("m2"): "", F("m3"): "", F("m4"): "", F("m5"): "", F("m5b"): "", F("m6"): "",
	} {
		if got := e.stored(t, k); got != want {
			t.Errorf("key %s: got %q, want %q", k, got, want)
		}
	}
}

// TestRedTeamAtomicity: a refused or failing command inside MULTI leaves
// nothing of the transaction; a stale token leaves nothing of a pipeline
// of writes that would fail half-way; limits hit after some commands ran
// roll them back.
func TestRedTeamAtomicity(t *testing.T) {
	rcfg := redis.DefaultConfig()
	rcfg.MaxValueBytes = 1024
	rcfg.MaxReplyBytes = 4096
	rcfg.Allow = []string{"COPY", "RENAME", "SUNIONSTORE", "ZPOPMIN"}
	e := newEnvRedis(t, resp.Config{}, proxy.Options{}, rcfg)
	f := unique("rtat")
	old, cur := e.succession(t, f)
	F := func(s string) string { return "{" + f + "}:" + s }
	r := authRaw(t, e, f, cur)
	// dbState reads every key the package's earlier tests left, twice per
	// transaction: more than the 20 s a raw connection is given.
	_ = r.c.SetDeadline(time.Now().Add(3 * time.Minute))
	r.send(cmd("SET", F("s"), "str") + cmd("RPUSH", F("l"), "a", "b") + cmd("HSET", F("h"), "f", "1") +
		cmd("SET", F("n"), "9223372036854775800") + cmd("SET", F("ttl"), "v", "EX", "1000"))
	for range 5 {
		r.wantReply("setup", "")
	}
	before := dbState(t, e)
	big := strings.Repeat("x", 1000)
	for _, tx := range [][][]string{
		{{"SET", F("new"), "1"}, {"LPUSH", F("s"), "x"}},
		{{"DEL", F("l")}, {"SET", F("s"), "2"}, {"INCRBY", F("n"), "100"}},
		{{"EXPIRE", F("ttl"), "1"}, {"HINCRBY", F("h"), "f", "9223372036854775807"}},
		{{"PERSIST", F("ttl")}, {"SET", F("x"), "1", "EX", "0"}},
		{{"RENAME", F("l"), F("l2")}, {"INCR", F("s")}},
		{{"COPY", F("l"), F("l3")}, {"APPEND", F("s"), big}, {"APPEND", F("s"), big}},
		{{"SETRANGE", F("s"), "0", "abc"}, {"SETRANGE", F("s"), "1020", "abcdefgh"}},
		{{"RPUSH", F("l"), big}, {"RPUSH", F("l"), big}, {"RPUSH", F("l"), big}, {"RPUSH", F("l"), big}, {"LRANGE", F("l"), "0", "-1"}},
		{{"SET", F("p"), "1"}, {"PEXPIREAT", F("p"), "9099999999999999"}, {"PTTL", F("p")}},
		{{"SUNIONSTORE", F("u"), F("l")}},
		{{"HSET", F("h"), "g", "2"}, {"ZPOPMIN", F("h")}},
		{{"XADD", F("st"), "*", "f", "v"}, {"XADD", F("st"), "1-1", "f", "v"}},
		{{"SET", F("k"), "1"}, {"GET", "{" + f + "x}:k"}},
		{{"SET", F("k"), "1"}, {"EVAL", "return 1", "0"}},
		{{"SET", F("k"), "1"}, {"SETRANGE", F("k"), "99999999999", "x"}},
		{{"SET", F("k"), "1"}, {"SRANDMEMBER", F("k"), "-99999999"}},
	} {
		var b strings.Builder
		b.WriteString(cmd("MULTI"))
		for _, c := range tx {
			b.WriteString(cmd(c...))
		}
		b.WriteString(cmd("EXEC"))
		r.send(b.String())
		r.wantReply("MULTI", "+OK")
		for range tx {
			r.reply()
		}
		got := r.reply()
		if !strings.HasPrefix(got, "-") {
			t.Errorf("MULTI %q: EXEC got %.200q, want an error", tx, got)
		}
		after := dbState(t, e)
		sameState(t, fmt.Sprintf("MULTI %q", tx), before, after, nil)
		before = after
	}
	// A zombie's pipelines and transactions of commands that would fail
	// half-way or succeed: nothing at all.
	z := authRaw(t, e, f, old)
	_ = z.c.SetDeadline(time.Now().Add(3 * time.Minute))
	var b strings.Builder
	for i := range 40 {
		b.WriteString(cmd("SET", F("z"+strconv.Itoa(i)), "1"))
		b.WriteString(cmd("LPUSH", F("s"), "x"))
		b.WriteString(cmd("DEL", F("l"), F("h")))
	}
	b.WriteString(cmd("MULTI") + cmd("DEL", F("s")) + cmd("LPUSH", F("s"), "x") + cmd("EXEC"))
	z.send(b.String())
	for range 120 {
		z.wantReply("zombie pipeline", "-STALE_TOKEN")
	}
	z.wantReply("zombie", "+OK")
	z.wantReply("zombie", "+QUEUED")
	z.wantReply("zombie", "+QUEUED")
	z.wantReply("zombie", "-STALE_TOKEN")
	sameState(t, "zombie", before, dbState(t, e), nil)
}

// TestRedTeamRollbackKeepsExpiry: a fenced write that fails half-way is
// rolled back; a key it wrote must come back with the expiry it had. The
// snapshot reads the key's remaining time with PTTL, and a key that has
// less than a millisecond left (or whose time runs out while the script
// snapshots the keys before it, Redis 7.0 timing PTTL by the clock while
// keeping the key alive by the script's start) reads 0, which RESTORE
// takes as "no expiry": the rolled-back write makes the key permanent.
func TestRedTeamRollbackKeepsExpiry(t *testing.T) {
	e := newEnv(t, resp.Config{})
	ctx := t.Context()
	f := unique("rtexp")
	tok, _ := e.lead(t, f)
	F := func(s string) string { return "{" + f + "}:" + s }
	r := authRaw(t, e, f, tok)
	// A big hash whose snapshot (DUMP) takes a few milliseconds.
	var b strings.Builder
	const perCmd = 2000
	for i := range 40 {
		args := []string{"HSET", F("big")}
		for j := range perCmd {
			args = append(args, strconv.Itoa(i*perCmd+j), "value-of-some-length")
		}
		b.WriteString(cmd(args...))
	}
	r.send(b.String())
	for range 40 {
		r.wantReply("HSET", ":")
	}
	var keys []string
	applied := 0
	for attempt := range 60 {
		k := F("e" + strconv.Itoa(attempt))
		keys = append(keys, k)
		px := strconv.Itoa(1 + attempt%30)
		// The key expires in px ms; the transaction writes big first (its
		// snapshot comes first), then fails on k (WRONGTYPE): rolled back.
		r.send(cmd("SET", k, "short-lived", "PX", px) +
			cmd("MULTI") + cmd("HSET", F("big"), "x", "y") + cmd("LPUSH", k, "z") + cmd("EXEC"))
		r.wantReply("SET PX", "+OK")
		r.wantReply("MULTI", "+OK")
		r.wantReply("QUEUED", "+QUEUED")
		r.wantReply("QUEUED", "+QUEUED")
		// Rolled back (WRONGTYPE), or applied when k had already expired
		// as the script ran and LPUSH made a list.
		switch got := r.reply(); {
		case strings.HasPrefix(got, "-EXECABORT"):
		case strings.HasPrefix(got, "*"):
			applied++
		default:
			t.Fatalf("EXEC: got %.100q, want -EXECABORT or the replies", got)
		}
	}
	time.Sleep(100 * time.Millisecond)
	var immortal []string
	for _, k := range keys {
		// Only the string a rolled-back write restored: a list is an
		// applied write's.
		if v, err := e.admin.Get(ctx, k).Result(); err != nil || v != "short-lived" {
			continue
		}
		if ttl, err := e.admin.PTTL(ctx, k).Result(); err == nil && ttl == -1 {
			immortal = append(immortal, k)
		}
	}
	if len(immortal) > 0 {
		t.Errorf("%d of %d keys set with PX 1..30 ms still exist without any expiry after a rolled-back write: %q",
			len(immortal), len(keys), immortal)
	}
	if _, err := e.admin.HGet(ctx, F("big"), "x").Result(); applied == 0 && !errors.Is(err, goredis.Nil) {
		t.Errorf("big: field x written by a rolled-back write (%v)", err)
	}
}

// TestRedTeamProtocol: malformed or unusual framing (negative and odd
// lengths, nested arrays, RESP3 types, inline oddities) never runs a
// command that writes, and fencegate keeps serving.
func TestRedTeamProtocol(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("rtproto")
	tok, _ := e.lead(t, f)
	k := "{" + f + "}:k"
	ts := strconv.FormatUint(tok, 10)
	before := dbState(t, e)
	for _, s := range []string{
		"*3\r\n$3\r\nSET\r\n$" + strconv.Itoa(len(k)) + "\r\n" + k + "\r\n$-1\r\n",
		"*3\r\n$3\r\nSET\r\n$" + strconv.Itoa(len(k)) + "\r\n" + k + "\r\n$-2\r\n",
		"*3\r\n$3\r\nSET\r\n$" + strconv.Itoa(len(k)) + "\r\n" + k + "\r\n$+1\r\nx\r\n",
		"*3\r\n$3\r\nSET\r\n$" + strconv.Itoa(len(k)) + "\r\n" + k + "\r\n$ 1\r\nx\r\n",
		"*3\r\n$3\r\nSET\r\n$" + strconv.Itoa(len(k)) + "\r\n" + k + "\r\n$1\r\nxy\r\n",
		"*3\r\n$3\r\nSET\r\n$" + strconv.Itoa(len(k)) + "\r\n" + k + "\r\n$18446744073709551617\r\nx\r\n",
		"*-2\r\n" + cmd("PING"),
		"*18446744073709551617\r\n",
		"*2\r\n*1\r\n$3\r\nSET\r\n$1\r\nx\r\n",
		"*1\r\n:1\r\n",
		"|1\r\n+a\r\n+b\r\n" + cmd("PING"),
		">2\r\n$3\r\nSET\r\n$1\r\nx\r\n",
		"%1\r\n$3\r\nSET\r\n$1\r\nx\r\n",
		"~1\r\n$3\r\nSET\r\n",
		"$3\r\nSET\r\n",
		"SET " + k + " \"inline\"\r\n",
		"SET\u00a0" + k + " x\r\n",
		"SET " + k + "\u00a0x y\r\n",
		"\x00SET " + k + " x\r\n",
	} {
		x := e.raw(t)
		x.send(cmd("AUTH", f, ts) + s + cmd("PING"))
		x.c.SetReadDeadline(time.Now().Add(2 * time.Second))
		for {
			l, err := x.br.ReadString('\n')
			if err != nil || strings.HasPrefix(l, "+PONG") {
				break
			}
		}
		x.c.Close()
	}
	// Unicode space: the inline parser splits only on ASCII white
	// space, as Redis does: "SET k\u00a0x y" sets the key k\u00a0x, in F.
	after := dbState(t, e)
	sameState(t, "protocol oddities", before, after, func(key string) bool {
		return strings.HasPrefix(key, "{"+f+"}") || key == "fencegate:{"+f+"}:token"
	})
	for key, v := range after {
		if strings.HasPrefix(key, "{"+f+"}") && key != k && key != k+"\u00a0x" {
			t.Errorf("protocol oddities: created %q (%s)", key, v)
		}
	}
	x := e.raw(t)
	x.send(cmd("PING"))
	x.want("+PONG")
}

// TestRedTeamLuaLayout: argument values that look like counts, command
// names or fencegate's keys are only ever values to the script; integer
// replies around 2^53 come back exact.
func TestRedTeamLuaLayout(t *testing.T) {
	e := newEnv(t, resp.Config{})
	f := unique("rtlua")
	tok, _ := e.lead(t, f)
	F := func(s string) string { return "{" + f + "}:" + s }
	tk := "fencegate:{" + f + "}:token"
	r := authRaw(t, e, f, tok)
	r.send(cmd("SET", F("seed"), "1"))
	r.want("+OK")
	before := dbState(t, e)
	// Values shaped like the script's per-command layout (argc, name,
	// args) of a command on the token key.
	r.send(cmd("MSET", F("a"), "3", F("b"), "SET", F("c"), tk, F("d"), "1") +
		cmd("SET", F("e"), "2", "GET") + cmd("HSET", F("h"), "DEL", tk, "3", "SET") +
		cmd("RPUSH", F("l"), "3", "SET", tk, "99") + cmd("APPEND", F("s"), "3") + cmd("APPEND", F("s"), "DEL"))
	for range 6 {
		r.wantReply("layout", "")
	}
	if got := e.stored(t, tk); got != strconv.FormatUint(tok, 10) {
		t.Errorf("token key: got %q, want %d", got, tok)
	}
	sameState(t, "layout", before, dbState(t, e), func(k string) bool { return strings.HasPrefix(k, "{"+f+"}") })
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"SET", F("n"), "9007199254740991"}, "+OK"},
		{[]string{"INCR", F("n")}, ":9007199254740992"},
		{[]string{"INCR", F("n")}, ":9007199254740993"},
		{[]string{"INCRBY", F("n"), "9214364837600034813"}, ":9223372036854775806"},
		{[]string{"INCR", F("n")}, ":9223372036854775807"},
		{[]string{"INCR", F("n")}, "-ERR increment or decrement would overflow"},
		{[]string{"GET", F("n")}, "$9223372036854775807"},
		{[]string{"DECRBY", F("m"), "9223372036854775807"}, ":-9223372036854775807"},
		{[]string{"DECR", F("m")}, ":-9223372036854775808"},
		{[]string{"DECR", F("m")}, "-ERR"},
		{[]string{"HINCRBY", F("hi"), "f", "-9007199254740993"}, ":-9007199254740993"},
		{[]string{"HINCRBY", F("hi"), "f", "-1"}, ":-9007199254740994"},
		{[]string{"SET", F("g"), "x"}, "+OK"},
		{[]string{"PEXPIREAT", F("g"), "9099999999999999"}, ":1"},
		{[]string{"PTTL", F("g")}, "-STATEMENT_FAILED"},
		{[]string{"TTL", F("g")}, ":"},
	} {
		r.send(cmd(tt.args...))
		if got := r.reply(); !strings.HasPrefix(got, tt.want) {
			t.Errorf("%q: got %q, want %q...", tt.args, got, tt.want)
		}
	}
}

// TestRedTeamPolicy: with a policy, the principal comes from the client
// certificate: AUTH and HELLO AUTH to a fence the principal may not write,
// even with that fence's valid token, mid-pipeline or before MULTI, are
// refused and write nothing.
func TestRedTeamPolicy(t *testing.T) {
	ca := authtest.NewCA(t, "resp")
	srvCert := ca.Localhost(t, "server")
	writer := ca.Issue(t, "writer", authtest.Leaf{URIs: []string{"spiffe://t/writer"}, Client: true})
	p, err := policy.Parse([]byte(`rules:
  - name: writers
    principals: ["spiffe://t/writer"]
    fences: ["rtpolA*"]
    actions: [redis.write]
  - name: frozen
    effect: deny
    principals: ["*"]
    fences: ["rtpolAfrozen*"]
    actions: [redis.write]
`))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, resp.Config{TLS: &tls.Config{
		Certificates: []tls.Certificate{srvCert.TLS},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.VerifyClientCertIfGiven,
	}}, proxy.Options{Policy: p, AuthRequired: true})
	a := unique("rtpolA")
	bfence := unique("rtpolB")
	fz := unique("rtpolAfrozen")
	atok, _ := e.lead(t, a)
	btok, _ := e.lead(t, bfence)
	ztok, _ := e.lead(t, fz)
	tc := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{writer.TLS}}
	conn, err := tls.Dial("tcp", e.addr, tc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	r := &raw{t: t, c: conn, br: bufio.NewReader(conn)}
	A := func(s string) string { return "{" + a + "}:" + s }
	B := func(s string) string { return "{" + bfence + "}:" + s }
	Z := func(s string) string { return "{" + fz + "}:" + s }
	at, bt, zt := strconv.FormatUint(atok, 10), strconv.FormatUint(btok, 10), strconv.FormatUint(ztok, 10)
	r.send(cmd("AUTH", a, at) + cmd("SET", A("k"), "1") +
		cmd("AUTH", bfence, bt) + cmd("SET", B("k"), "1") + cmd("GET", B("k")) +
		cmd("HELLO", "2", "AUTH", bfence, bt) + cmd("SET", B("k2"), "1") +
		cmd("AUTH", fz, zt) + cmd("SET", Z("k"), "1") +
		cmd("AUTH", a, at) + cmd("MULTI") + cmd("SET", A("m"), "1") + cmd("AUTH", bfence, bt) + cmd("EXEC") +
		cmd("AUTH", bfence, bt) + cmd("MULTI") + cmd("SET", B("m"), "1") + cmd("EXEC"))
	for _, want := range []string{
		"+OK", "+OK",
		"+OK", "-NOT_AUTHORIZED", "-NOT_AUTHORIZED",
		"*", "-NOT_AUTHORIZED",
		"+OK", "-NOT_AUTHORIZED",
		"+OK", "+OK", "+QUEUED", "-ERR", "-EXECABORT",
		"+OK", "+OK", "+QUEUED", "-NOT_AUTHORIZED",
	} {
		r.wantReply("policy", want)
	}
	for k, want := range map[string]string{A("k"): "1", B("k"): "", B("k2"): "", Z("k"): "", A("m"): "", B("m"): ""} {
		if got := e.stored(t, k); got != want {
			t.Errorf("key %s: got %q, want %q", k, got, want)
		}
	}
}

// TestRedTeamLease: a lease fence's lease and counter cannot be named by
// any command, and writes are refused (nothing written) once a newer
// holder took the lease or the lease is gone, whatever etcd says.
func TestRedTeamLease(t *testing.T) {
	rcfg := redis.DefaultConfig()
	rcfg.Leases = func(fence string) (redis.LeaseKeys, bool) {
		if !strings.HasPrefix(fence, "rtlease") {
			return redis.LeaseKeys{}, false
		}
		return redis.LeaseKeys{Lease: "{" + fence + "}:lease", Counter: "{" + fence + "}:lease:token"}, true
	}
	rcfg.Allow = []string{"RENAME", "COPY", "SUNIONSTORE"}
	e := newEnvRedis(t, resp.Config{}, proxy.Options{}, rcfg)
	ctx := t.Context()
	f := unique("rtlease")
	tok, _ := e.lead(t, f)
	ts := strconv.FormatUint(tok, 10)
	F := func(s string) string { return "{" + f + "}:" + s }
	lease, counter := F("lease"), F("lease:token")
	if err := e.admin.Set(ctx, lease, "holder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Set(ctx, counter, ts, 0).Err(); err != nil {
		t.Fatal(err)
	}
	r := authRaw(t, e, f, tok)
	r.send(cmd("SET", F("k"), "1"))
	r.want("+OK")
	before := dbState(t, e)
	for _, c := range [][]string{
		{"GET", lease},
		{"GET", counter},
		{"DEL", lease},
		{"INCR", counter},
		{"SET", counter, "99999"},
		{"EXPIRE", lease, "100000"},
		{"PERSIST", lease},
		{"PEXPIRE", lease, "1"},
		{"MSET", F("x"), "1", counter, "1"},
		{"RENAME", F("k"), lease},
		{"RENAME", lease, F("y")},
		{"COPY", F("k"), counter, "REPLACE"},
		{"SUNIONSTORE", lease, F("k")},
		{"GETDEL", lease},
		{"SET", lease, "mine", "KEEPTTL"},
		{"DEL", F("k"), lease},
	} {
		r.send(cmd(c...))
		if got := r.reply(); !strings.HasPrefix(got, "-") {
			t.Errorf("%q: got %q, want a refusal", c, got)
		}
	}
	r.send(cmd("MULTI") + cmd("SET", F("k"), "2") + cmd("DEL", lease) + cmd("EXEC"))
	r.want("+OK")
	r.want("+QUEUED")
	r.want("+QUEUED")
	r.wantReply("lease MULTI", "-")
	sameState(t, "lease keys", before, dbState(t, e), nil)
	// A newer holder's counter: the etcd-current token is a zombie's.
	if err := e.admin.Incr(ctx, counter).Err(); err != nil {
		t.Fatal(err)
	}
	before = dbState(t, e)
	r.send(cmd("SET", F("k"), "zombie") + cmd("MULTI") + cmd("SET", F("k"), "z2") + cmd("EXEC"))
	r.wantReply("lease stale", "-STALE_TOKEN")
	r.want("+OK")
	r.want("+QUEUED")
	r.wantReply("lease stale", "-STALE_TOKEN")
	sameState(t, "lease stale", before, dbState(t, e), nil)
	// Lease gone.
	if err := e.admin.Set(ctx, counter, ts, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Del(ctx, lease).Err(); err != nil {
		t.Fatal(err)
	}
	before = dbState(t, e)
	r.send(cmd("SET", F("k"), "ended"))
	r.wantReply("lease ended", "-TERM_ENDED")
	sameState(t, "lease ended", before, dbState(t, e), nil)
}

// TestRedTeamRollbackKeepsExpiryMinimal: the same hole without a big key,
// with one command: a key set to expire in 1 ms, then ZADD on it, which
// fails (WRONGTYPE) and is not one of the commands written without a
// snapshot; or a transaction whose second command fails the same way.
// When the script starts in the key's last millisecond, PTTL reads 0 and
// the rollback's RESTORE makes the key permanent.
func TestRedTeamRollbackKeepsExpiryMinimal(t *testing.T) {
	e := newEnv(t, resp.Config{})
	ctx := t.Context()
	f := unique("rtexpmin")
	tok, _ := e.lead(t, f)
	F := func(s string) string { return "{" + f + "}:" + s }
	r := authRaw(t, e, f, tok)
	for _, tt := range []struct {
		name    string
		failing func(k string) string
		replies int
	}{
		{"zadd", func(k string) string { return cmd("ZADD", k, "1", "m") }, 1},
		{"multi", func(k string) string {
			return cmd("MULTI") + cmd("SET", F("other"), "x") + cmd("LPUSH", k, "z") + cmd("EXEC")
		}, 4},
	} {
		const n = 300
		var keys []string
		for i := range n {
			k := F(tt.name + strconv.Itoa(i))
			keys = append(keys, k)
			r.send(cmd("SET", k, "short-lived", "PX", "1") + tt.failing(k))
			r.wantReply("SET PX", "+OK")
			// The failing write refused, or applied to a new key when
			// the first had already expired.
			for range tt.replies {
				r.reply()
			}
		}
		time.Sleep(50 * time.Millisecond)
		var immortal []string
		for _, k := range keys {
			v, err := e.admin.Get(ctx, k).Result()
			if err != nil || v != "short-lived" {
				continue
			}
			if ttl, err := e.admin.PTTL(ctx, k).Result(); err == nil && ttl == -1 {
				immortal = append(immortal, k)
			}
		}
		if len(immortal) > 0 {
			t.Errorf("%s: %d of %d keys set with PX 1 exist without expiry after a rolled-back write (e.g. %q = \"short-lived\", PTTL -1)",
				tt.name, len(immortal), n, immortal[0])
		}
	}
}

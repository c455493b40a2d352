package resp_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/resp"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/redis"
	"github.com/fencegate/fencegate/proxy/redis/throwaway"
)

// shapeScript is a session of commands whose replies must be the bytes
// Redis itself sends, in RESP2 and in RESP3. {F} is the fence's
// hash tag. Every reply is deterministic: random picks are made from one
// element, and expirations are read only when there are none.
var shapeScript = []string{
	// strings
	"SET {F}:s hello", "GET {F}:s", "GET {F}:missing", "SET {F}:s world GET",
	"SET {F}:s x NX", "SETNX {F}:s y", "SETEX {F}:e 100 v", "PSETEX {F}:pe 100000 v",
	"GETSET {F}:s z", "GETDEL {F}:e", "GETEX {F}:s PERSIST",
	"MSET {F}:m1 a {F}:m2 b", "MGET {F}:m1 {F}:missing {F}:m2", "MSETNX {F}:m1 a {F}:m3 c",
	"APPEND {F}:s ab", "INCR {F}:n", "INCRBY {F}:n 5", "DECR {F}:n", "DECRBY {F}:n 2",
	"INCRBYFLOAT {F}:f 1.5", "INCRBYFLOAT {F}:f 0.1", "INCRBY {F}:big 9007199254740993",
	"STRLEN {F}:s", "SETRANGE {F}:s 1 QQ", "GETRANGE {F}:s 0 -1", "SET {F}:ok OK", "GET {F}:ok",
	// keys
	"EXISTS {F}:s {F}:missing", "EXPIRE {F}:s 1000", "PEXPIRE {F}:s 1000000",
	"EXPIREAT {F}:s 4000000000", "PEXPIREAT {F}:s 4000000000000", "PERSIST {F}:s",
	"TTL {F}:s", "PTTL {F}:missing", "TYPE {F}:s", "TYPE {F}:missing", "DEL {F}:m3 {F}:missing", "UNLINK {F}:m2",
	// hashes
	"HSET {F}:h a 1 b 2", "HSETNX {F}:h a 3", "HGET {F}:h a", "HGET {F}:h zz", "HMGET {F}:h a zz b",
	"HMSET {F}:h c 3", "HINCRBY {F}:h a 10", "HINCRBYFLOAT {F}:h f 2.5", "HGETALL {F}:h",
	"HGETALL {F}:missing", "HEXISTS {F}:h a", "HLEN {F}:h", "HKEYS {F}:h", "HVALS {F}:h", "HDEL {F}:h c",
	// lists
	"LPUSH {F}:l a b c", "RPUSH {F}:l d", "LPUSHX {F}:l e", "RPUSHX {F}:missing e", "LLEN {F}:l",
	"LRANGE {F}:l 0 -1", "LRANGE {F}:missing 0 -1", "LINDEX {F}:l 0", "LSET {F}:l 0 x", "LREM {F}:l 1 x",
	"LTRIM {F}:l 0 10", "LINSERT {F}:l BEFORE a y", "LMOVE {F}:l {F}:l2 LEFT RIGHT",
	"LPOP {F}:l", "RPOP {F}:l 2", "LPOP {F}:missing", "RPOP {F}:missing 2",
	// sets
	"SADD {F}:set 1 2 3", "SREM {F}:set 3", "SISMEMBER {F}:set 1", "SMEMBERS {F}:set",
	"SMEMBERS {F}:missing", "SCARD {F}:set", "SADD {F}:one 7", "SPOP {F}:one 1", "SADD {F}:one 8",
	"SPOP {F}:one", "SPOP {F}:missing", "SPOP {F}:missing 3", "SMOVE {F}:set {F}:set2 1",
	// sorted sets
	"ZADD {F}:z 1 a 2.5 b", "ZADD {F}:z INCR 1 a", "ZADD {F}:z NX INCR 1 a", "ZINCRBY {F}:z 1.5 b",
	"ZINCRBY {F}:z 0.1 c", "ZINCRBY {F}:z 0.2 c", "ZSCORE {F}:z a", "ZSCORE {F}:z missing",
	"ZCARD {F}:z", "ZRANGE {F}:z 0 -1", "ZRANGE {F}:z 0 -1 WITHSCORES", "ZRANGE {F}:missing 0 -1 WITHSCORES",
	"ZRANGE {F}:z +inf -inf BYSCORE REV LIMIT 0 2 WITHSCORES", "ZRANGEBYSCORE {F}:z -inf +inf",
	"ZRANGEBYSCORE {F}:z -inf +inf WITHSCORES", "ZRANK {F}:z a", "ZRANK {F}:z missing", "ZCOUNT {F}:z 0 10",
	"ZADD {F}:z 1e300 big -inf low", "ZRANGE {F}:z 0 -1 WITHSCORES",
	"ZREMRANGEBYSCORE {F}:z 100 +inf", "ZREMRANGEBYRANK {F}:z 0 0", "ZREM {F}:z a",
	// streams
	"XADD {F}:x 1-1 f v g w", "XADD {F}:x 2-1 f v2", "XLEN {F}:x", "XRANGE {F}:x - +",
	"XRANGE {F}:x - + COUNT 1", "XTRIM {F}:x MAXLEN 10", "XDEL {F}:x 2-1",
	// optional commands
	"SET {F}:r v", "RENAME {F}:r {F}:r2", "RENAMENX {F}:r2 {F}:s", "COPY {F}:r2 {F}:r3",
	"HSTRLEN {F}:h a", "HSET {F}:h1 k v", "HRANDFIELD {F}:h1", "HRANDFIELD {F}:h1 1",
	"HRANDFIELD {F}:h1 1 WITHVALUES", "HRANDFIELD {F}:missing 1 WITHVALUES",
	"RPUSH {F}:lp a b a", "LPOS {F}:lp a", "LPOS {F}:lp a COUNT 0", "LPOS {F}:lp zz",
	"SADD {F}:s1 x", "SRANDMEMBER {F}:s1", "SRANDMEMBER {F}:s1 1", "SRANDMEMBER {F}:s1 -2",
	"SADD {F}:sa 1 2 3", "SADD {F}:sb 2 3 4", "SMISMEMBER {F}:sa 1 9",
	"SINTER {F}:sa {F}:sb", "SUNION {F}:sa {F}:sb", "SDIFF {F}:sa {F}:sb", "SINTER {F}:missing {F}:sa",
	"SINTERSTORE {F}:si {F}:sa {F}:sb", "SUNIONSTORE {F}:su {F}:sa {F}:sb", "SDIFFSTORE {F}:sd {F}:sa {F}:sb",
	"ZADD {F}:zz 1 a 2 b 3 c 4 d", "ZREVRANGE {F}:zz 0 -1", "ZREVRANGE {F}:zz 0 1 WITHSCORES",
	"ZREVRANK {F}:zz a", "ZMSCORE {F}:zz a zz c", "ZPOPMIN {F}:zz", "ZPOPMIN {F}:zz 2", "ZPOPMAX {F}:zz 1",
	"ZPOPMIN {F}:missing", "ZPOPMAX {F}:missing 2", "ZADD {F}:zz 5 e 6 f", "ZRANGESTORE {F}:zr {F}:zz 0 -1",
	"XREVRANGE {F}:x + -", "SETBIT {F}:b 7 1", "GETBIT {F}:b 7", "BITCOUNT {F}:b", "PFADD {F}:p a b",
	// options in any case, and option words as members
	"ZADD {F}:zc xx incr 1 a", "ZADD {F}:zc 1 INCR", "ZADD {F}:zc incr 2 INCR", "ZRANGE {F}:zc 0 -1 withscores",
	"ZRANGEBYSCORE {F}:zc -inf +inf LIMIT 0 1 WITHSCORES", "ZRANGE {F}:zc 0 -1 LIMIT 0 1",
	"HRANDFIELD {F}:h1 -1 withvalues", "lpop {F}:missing 1",
	// commands fencegate answers itself
	"PING", "PING hello", "ECHO hi", "SELECT 0", "CLIENT SETNAME shape", "CLIENT GETNAME",
	// a transaction's replies
	"MULTI", "HGETALL {F}:h", "ZSCORE {F}:zz e", "LPOP {F}:missing 2", "SMEMBERS {F}:sa", "SET {F}:t v", "EXEC",
	// Redis's own errors
	"GET {F}:h", "INCR {F}:s", "ZADD {F}:z INCR 1 a 2 b", "LSET {F}:missing 0 x", "HINCRBYFLOAT {F}:h a x",
}

// TestReplyShapesAsRedis runs shapeScript through the listener and straight
// against a Redis server of the same build, in RESP2 and in RESP3, and
// requires the same bytes for every reply: a client that decodes by type
// (redis-py's RESP3 parser, a map for HGETALL, doubles for ZSCORE) sees
// what it would from Redis.
func TestReplyShapesAsRedis(t *testing.T) {
	e, ref := againstRedis(t)

	// Every command fencegate can allow is in the script.
	inScript := map[string]bool{}
	for _, line := range shapeScript {
		inScript[strings.ToUpper(strings.Fields(line)[0])] = true
	}
	for _, name := range append(redis.DefaultCommands(), redis.OptionalCommands()...) {
		if !inScript[name] {
			t.Errorf("%s is not in shapeScript: add it, so its replies are compared with Redis's", name)
		}
	}

	for _, proto := range []int{2, 3} {
		// One command at a time, and the whole script in one pipeline:
		// fencegate runs a pipeline's commands as one fenced write, and
		// when one of them fails runs the others again around it, so each
		// must still get Redis's answer.
		for _, pipelined := range []bool{false, true} {
			name := fmt.Sprintf("RESP%d", proto)
			if pipelined {
				name += " pipelined"
			}
			t.Run(name, func(t *testing.T) {
				fence, viaFG, direct := e.pair(t, ref, "shape", proto)
				cmds := make([]string, len(shapeScript))
				for i, line := range shapeScript {
					cmds[i] = strings.ReplaceAll(line, "{F}", "{"+fence+"}")
				}
				var got, want [][]byte
				if pipelined {
					got, want = viaFG.pipeline(t, cmds), direct.pipeline(t, cmds)
				} else {
					for _, cmd := range cmds {
						got, want = append(got, viaFG.do(t, cmd)), append(want, direct.do(t, cmd))
					}
				}
				for i, line := range shapeScript {
					if !bytes.Equal(got[i], want[i]) {
						t.Errorf("%s\n fencegate: %q\n     Redis: %q", line, got[i], want[i])
					}
				}
			})
		}
	}
}

// rawConn sends commands and reads whole replies, as bytes.
type rawConn struct {
	c net.Conn
	r *bufio.Reader
}

// againstRedis starts a listener with every optional command allowed and
// a second throwaway Redis of the same build, returning the latter's
// address: the two answer the same commands, byte for byte.
func againstRedis(t *testing.T) (*env, string) {
	t.Helper()
	ref, err := throwaway.Start(t.Context(), throwaway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })
	rcfg := redis.DefaultConfig()
	rcfg.Allow = redis.OptionalCommands()
	return newEnvRedis(t, resp.Config{}, proxy.Options{}, rcfg), ref.Addr()
}

// pair leads a new fence named after prefix and connects, in protocol
// proto, to the listener logged in with it and to the Redis at ref.
func (e *env) pair(t *testing.T, ref, prefix string, proto int) (fence string, viaFG, direct *rawConn) {
	t.Helper()
	fence = unique(prefix)
	token, _ := e.lead(t, fence)
	viaFG = dialRaw(t, e.addr, fmt.Sprintf("HELLO %d AUTH %s %d", proto, fence, token))
	direct = dialRaw(t, ref, fmt.Sprintf("HELLO %d", proto))
	return fence, viaFG, direct
}

func dialRaw(t *testing.T, addr, hello string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc := &rawConn{c: c, r: bufio.NewReader(c)}
	if reply := rc.do(t, hello); reply[0] == '-' {
		t.Fatalf("%s: %q", hello, reply)
	}
	return rc
}

// do sends cmd, split on spaces, as a RESP array and returns its reply.
func (rc *rawConn) do(t *testing.T, cmd string) []byte {
	t.Helper()
	return rc.pipeline(t, []string{cmd})[0]
}

// doArgs sends one command given as its arguments and returns its reply.
func (rc *rawConn) doArgs(t *testing.T, args ...string) []byte {
	t.Helper()
	return rc.send(t, [][]string{args})[0]
}

// pipeline sends cmds, each split on spaces, in one write and returns
// their replies.
func (rc *rawConn) pipeline(t *testing.T, cmds []string) [][]byte {
	t.Helper()
	split := make([][]string, len(cmds))
	for i, cmd := range cmds {
		split[i] = strings.Fields(cmd)
	}
	return rc.send(t, split)
}

// send writes cmds as RESP arrays in one write and reads their replies.
func (rc *rawConn) send(t *testing.T, cmds [][]string) [][]byte {
	t.Helper()
	var b bytes.Buffer
	for _, args := range cmds {
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	_ = rc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := rc.c.Write(b.Bytes()); err != nil {
		t.Fatalf("%q: %v", cmds[0], err)
	}
	replies := make([][]byte, len(cmds))
	for i, args := range cmds {
		reply, err := readRawReply(rc.r)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		replies[i] = reply
	}
	return replies
}

// readRawReply reads one whole RESP2 or RESP3 reply.
func readRawReply(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("malformed line %q", line)
	}
	n, _ := strconv.Atoi(string(line[1 : len(line)-2]))
	switch line[0] {
	case '$', '!', '=': // bulk string, bulk error, verbatim string
		if n < 0 {
			return line, nil
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, err
		}
		return append(line, body...), nil
	case '*', '~', '>', '%', '|': // array, set, push, map, attribute
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		out := line
		for range max(n, 0) {
			e, err := readRawReply(r)
			if err != nil {
				return nil, err
			}
			out = append(out, e...)
		}
		if line[0] == '|' { // an attribute precedes the reply it describes
			e, err := readRawReply(r)
			if err != nil {
				return nil, err
			}
			out = append(out, e...)
		}
		return out, nil
	}
	return line, nil // +, -, :, ",", _, #, (
}

// TestAttackProtocolInData: members, fields and values that look like RESP
// (line ends, "+OK", ":7", ",1.5") go through every reshaped reply as the
// bulk strings Redis sends, in both protocols, and the reply after them is
// intact: data stored by one client cannot split another's reply stream.
func TestAttackProtocolInData(t *testing.T) {
	e, ref := againstRedis(t)
	evil := []string{"a\r\n+OK", "b\r\n:7\r\n", "c\r\n,1.5", "d\n%1\r\n"}
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			fence, viaFG, direct := e.pair(t, ref, "evil", proto)
			k := func(name string) string { return "{" + fence + "}:" + name }
			script := [][]string{
				{"HSET", k("h"), evil[0], evil[1], evil[2], evil[3]},
				{"ZADD", k("z"), "1", evil[0], "2", evil[1], "3", evil[2]},
				{"SADD", k("s"), evil[3]},
				{"HSET", k("h1"), evil[2], evil[3]},
				{"HGETALL", k("h")},
				{"ZRANGE", k("z"), "0", "-1", "WITHSCORES"},
				{"ZRANGEBYSCORE", k("z"), "-inf", "+inf", "WITHSCORES"},
				{"ZSCORE", k("z"), evil[1]},
				{"ZMSCORE", k("z"), evil[0], evil[3]},
				{"SMEMBERS", k("s")},
				{"HRANDFIELD", k("h1"), "1", "WITHVALUES"},
				{"ZPOPMIN", k("z")},
				{"ZPOPMAX", k("z"), "2"},
				{"SPOP", k("s"), "1"},
				{"SET", k("v"), evil[0]},
				{"SET", k("v"), evil[1], "GET"},
				{"PING"},
			}
			for _, args := range script {
				got, want := viaFG.doArgs(t, args...), direct.doArgs(t, args...)
				if !bytes.Equal(got, want) {
					t.Errorf("%q\n fencegate: %q\n     Redis: %q", args, got, want)
				}
			}
		})
	}
}

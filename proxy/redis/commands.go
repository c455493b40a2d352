package redis

import (
	"sort"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/tokens"
)

// commandSpec describes where a command's keys are, in the terms of
// COMMAND INFO: arity (positive: exact argument count including the name;
// negative: at least -arity), the positions of the first and last key
// (negative last counts from the end, -1 being the last argument) and the
// step between keys.
type commandSpec struct {
	arity       int
	first, last int
	step        int
	// write: the command may modify its keys, so they are snapshotted for
	// the rollback.
	write bool
	// optional: known but not allowed unless named in Config.Allow.
	optional bool
}

func spec(arity, first, last, step int, write bool) commandSpec {
	return commandSpec{arity: arity, first: first, last: last, step: step, write: write}
}

const (
	r = false // reads its keys
	w = true  // may write its keys
)

// commandTable lists the commands fencegate knows how to check: their
// arity and key positions as Redis 7 reports them. Only commands whose keys
// are all at fixed positions can be here (no numkeys arguments, no
// SORT ... STORE), so every key a command touches is found, checked and
// snapshotted.
var commandTable = map[string]commandSpec{
	// strings
	"GET":         spec(2, 1, 1, 1, r),
	"SET":         spec(-3, 1, 1, 1, w),
	"SETNX":       spec(3, 1, 1, 1, w),
	"SETEX":       spec(4, 1, 1, 1, w),
	"PSETEX":      spec(4, 1, 1, 1, w),
	"GETSET":      spec(3, 1, 1, 1, w),
	"GETDEL":      spec(2, 1, 1, 1, w),
	"GETEX":       spec(-2, 1, 1, 1, w),
	"MGET":        spec(-2, 1, -1, 1, r),
	"MSET":        spec(-3, 1, -1, 2, w),
	"MSETNX":      spec(-3, 1, -1, 2, w),
	"APPEND":      spec(3, 1, 1, 1, w),
	"INCR":        spec(2, 1, 1, 1, w),
	"INCRBY":      spec(3, 1, 1, 1, w),
	"INCRBYFLOAT": spec(3, 1, 1, 1, w),
	"DECR":        spec(2, 1, 1, 1, w),
	"DECRBY":      spec(3, 1, 1, 1, w),
	"STRLEN":      spec(2, 1, 1, 1, r),
	"SETRANGE":    spec(4, 1, 1, 1, w),
	"GETRANGE":    spec(4, 1, 1, 1, r),
	// keys
	"DEL":       spec(-2, 1, -1, 1, w),
	"UNLINK":    spec(-2, 1, -1, 1, w),
	"EXISTS":    spec(-2, 1, -1, 1, r),
	"EXPIRE":    spec(-3, 1, 1, 1, w),
	"PEXPIRE":   spec(-3, 1, 1, 1, w),
	"EXPIREAT":  spec(-3, 1, 1, 1, w),
	"PEXPIREAT": spec(-3, 1, 1, 1, w),
	"PERSIST":   spec(2, 1, 1, 1, w),
	"TTL":       spec(2, 1, 1, 1, r),
	"PTTL":      spec(2, 1, 1, 1, r),
	"TYPE":      spec(2, 1, 1, 1, r),
	// hashes
	"HSET":         spec(-4, 1, 1, 1, w),
	"HSETNX":       spec(4, 1, 1, 1, w),
	"HGET":         spec(3, 1, 1, 1, r),
	"HMGET":        spec(-3, 1, 1, 1, r),
	"HMSET":        spec(-4, 1, 1, 1, w),
	"HDEL":         spec(-3, 1, 1, 1, w),
	"HINCRBY":      spec(4, 1, 1, 1, w),
	"HINCRBYFLOAT": spec(4, 1, 1, 1, w),
	"HGETALL":      spec(2, 1, 1, 1, r),
	"HEXISTS":      spec(3, 1, 1, 1, r),
	"HLEN":         spec(2, 1, 1, 1, r),
	"HKEYS":        spec(2, 1, 1, 1, r),
	"HVALS":        spec(2, 1, 1, 1, r),
	// lists
	"LPUSH":   spec(-3, 1, 1, 1, w),
	"RPUSH":   spec(-3, 1, 1, 1, w),
	"LPUSHX":  spec(-3, 1, 1, 1, w),
	"RPUSHX":  spec(-3, 1, 1, 1, w),
	"LPOP":    spec(-2, 1, 1, 1, w),
	"RPOP":    spec(-2, 1, 1, 1, w),
	"LLEN":    spec(2, 1, 1, 1, r),
	"LRANGE":  spec(4, 1, 1, 1, r),
	"LINDEX":  spec(3, 1, 1, 1, r),
	"LSET":    spec(4, 1, 1, 1, w),
	"LREM":    spec(4, 1, 1, 1, w),
	"LTRIM":   spec(4, 1, 1, 1, w),
	"LINSERT": spec(5, 1, 1, 1, w),
	"LMOVE":   spec(5, 1, 2, 1, w),
	// sets
	"SADD":      spec(-3, 1, 1, 1, w),
	"SREM":      spec(-3, 1, 1, 1, w),
	"SISMEMBER": spec(3, 1, 1, 1, r),
	"SMEMBERS":  spec(2, 1, 1, 1, r),
	"SCARD":     spec(2, 1, 1, 1, r),
	"SPOP":      spec(-2, 1, 1, 1, w),
	"SMOVE":     spec(4, 1, 2, 1, w),
	// sorted sets
	"ZADD":             spec(-4, 1, 1, 1, w),
	"ZREM":             spec(-3, 1, 1, 1, w),
	"ZINCRBY":          spec(4, 1, 1, 1, w),
	"ZSCORE":           spec(3, 1, 1, 1, r),
	"ZCARD":            spec(2, 1, 1, 1, r),
	"ZRANGE":           spec(-4, 1, 1, 1, r),
	"ZRANGEBYSCORE":    spec(-4, 1, 1, 1, r),
	"ZREMRANGEBYSCORE": spec(4, 1, 1, 1, w),
	"ZREMRANGEBYRANK":  spec(4, 1, 1, 1, w),
	"ZRANK":            spec(-3, 1, 1, 1, r), // WITHSCORE since 7.2
	"ZCOUNT":           spec(4, 1, 1, 1, r),
	// streams
	"XADD":   spec(-5, 1, 1, 1, w),
	"XLEN":   spec(2, 1, 1, 1, r),
	"XRANGE": spec(-4, 1, 1, 1, r),
	"XTRIM":  spec(-4, 1, 1, 1, w),
	"XDEL":   spec(-3, 1, 1, 1, w),

	// Known, not allowed by default: Config.Allow can add them.
	"RENAME":      optional(3, 1, 2, 1, w),
	"RENAMENX":    optional(3, 1, 2, 1, w),
	"COPY":        optional(-3, 1, 2, 1, w),
	"HSTRLEN":     optional(3, 1, 1, 1, r),
	"HRANDFIELD":  optional(-2, 1, 1, 1, r),
	"LPOS":        optional(-3, 1, 1, 1, r),
	"SRANDMEMBER": optional(-2, 1, 1, 1, r),
	"SMISMEMBER":  optional(-3, 1, 1, 1, r),
	"SINTER":      optional(-2, 1, -1, 1, r),
	"SUNION":      optional(-2, 1, -1, 1, r),
	"SDIFF":       optional(-2, 1, -1, 1, r),
	"SINTERSTORE": optional(-3, 1, -1, 1, w),
	"SUNIONSTORE": optional(-3, 1, -1, 1, w),
	"SDIFFSTORE":  optional(-3, 1, -1, 1, w),
	"ZREVRANGE":   optional(-4, 1, 1, 1, r),
	"ZREVRANK":    optional(-3, 1, 1, 1, r), // WITHSCORE since 7.2
	"ZMSCORE":     optional(-3, 1, 1, 1, r),
	"ZPOPMIN":     optional(-2, 1, 1, 1, w),
	"ZPOPMAX":     optional(-2, 1, 1, 1, w),
	"ZRANGESTORE": optional(-5, 1, 2, 1, w),
	"XREVRANGE":   optional(-4, 1, 1, 1, r),
	"SETBIT":      optional(4, 1, 1, 1, w),
	"GETBIT":      optional(3, 1, 1, 1, r),
	"BITCOUNT":    optional(-2, 1, 1, 1, r),
	"PFADD":       optional(-2, 1, 1, 1, w),
}

func optional(arity, first, last, step int, write bool) commandSpec {
	s := spec(arity, first, last, step, write)
	s.optional = true
	return s
}

// refusedFamilies explains why well-known commands are refused. Anything
// else outside the allowlist is refused as unknown.
var refusedFamilies = func() map[string]string {
	m := map[string]string{}
	add := func(why string, names ...string) {
		for _, n := range names {
			m[n] = why
		}
	}
	add("scripting is not allowed in a fenced write",
		"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO", "FUNCTION", "SCRIPT")
	add("administrative commands are not allowed",
		"CONFIG", "FLUSHALL", "FLUSHDB", "SHUTDOWN", "DEBUG", "KEYS", "SCAN", "SAVE", "BGSAVE",
		"BGREWRITEAOF", "REPLICAOF", "SLAVEOF", "CLIENT", "ACL", "MODULE", "CLUSTER", "MONITOR",
		"SLOWLOG", "LATENCY", "MEMORY", "OBJECT", "INFO", "FAILOVER", "MIGRATE", "RESTORE", "DUMP",
		"RANDOMKEY", "DBSIZE", "LASTSAVE", "COMMAND", "SORT", "SORT_RO")
	add("blocking commands are not allowed (they cannot block inside a script)",
		"BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP",
		"XREAD", "XREADGROUP", "WAIT", "WAITAOF")
	add("pub/sub is not allowed",
		"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE",
		"PUBLISH", "SPUBLISH", "PUBSUB")
	add("transactions are not allowed (the write already is one)",
		"MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH")
	add("switching or moving between databases is not allowed",
		"SELECT", "MOVE", "SWAPDB")
	return m
}()

// reservedPrefix starts every key fencegate keeps for itself.
const reservedPrefix = "fencegate:"

// maxArgs bounds the arguments of one command: the script unpacks them onto
// the Lua stack, which holds at most 8000 values.
const maxArgs = 4096

// allowlist maps upper-case command names to their spec.
type allowlist map[string]commandSpec

// newAllowlist returns the default allowlist plus extra, which must name
// commands of the table.
func newAllowlist(extra []string) (allowlist, error) {
	a := allowlist{}
	for name, s := range commandTable {
		if !s.optional {
			a[name] = s
		}
	}
	for _, name := range extra {
		up := strings.ToUpper(name)
		s, ok := commandTable[up]
		if !ok {
			return nil, errUnknownAllow(name)
		}
		a[up] = s
	}
	return a, nil
}

type errUnknownAllow string

func (e errUnknownAllow) Error() string {
	return "redis: Allow names " + strconv.Quote(string(e)) +
		", which fencegate cannot check (it knows the key positions of: " + strings.Join(optionalNames(), " ") + ")"
}

func optionalNames() []string {
	var names []string
	for n, s := range commandTable {
		if s.optional {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// lookup finds a command by name, in any case, without allocating for names
// already in upper case.
func (a allowlist) lookup(name string) (commandSpec, bool) {
	if s, ok := a[name]; ok {
		return s, true
	}
	for i := 0; i < len(name); i++ {
		if 'a' <= name[i] && name[i] <= 'z' {
			s, ok := a[strings.ToUpper(name)]
			return s, ok
		}
	}
	return commandSpec{}, false
}

// plan is a checked request: the script's KEYS and ARGV.
type plan struct {
	keys []string // the token key, the written keys, then the keys only read
	nw   int      // number of written keys
	args []any    // token, number of written keys, then per command: argc, args...
}

// check validates a request before anything is sent and lays it out for
// the script. A refusal has Fence and Token set.
func (b *Backend) check(fence string, t tokens.Token, tokenKey string, cmds [][]string) (plan, *tokens.RefusalError) {
	switch {
	case fence == "":
		return plan{}, tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "empty fence name")
	case strings.ContainsAny(fence, "{}"):
		return plan{}, tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "fence name %q must not contain '{' or '}'", fence)
	case t == 0:
		return plan{}, tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "fencing token must be greater than 0")
	case len(cmds) == 0:
		return plan{}, tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "no commands")
	}
	nargs := 2
	for _, c := range cmds {
		nargs += 1 + len(c)
	}
	p := plan{keys: make([]string, 1, 1+len(cmds)), args: make([]any, 2, nargs)}
	p.keys[0] = tokenKey
	p.args[0] = t.String()
	var written, read keySet
	tokenSlot := -1
	if b.cfg.CheckSlots {
		tokenSlot = Slot(tokenKey)
	}
	for i, c := range cmds {
		if len(c) == 0 || c[0] == "" {
			return plan{}, refuseCommand(tokens.ReasonInvalidRequest, fence, t, i, "empty command")
		}
		s, ok := b.allow.lookup(c[0])
		if !ok {
			why := refusedFamilies[strings.ToUpper(c[0])]
			if why == "" {
				why = "not in the allowlist"
			}
			return plan{}, refuseCommand(tokens.ReasonCommandNotAllowed, fence, t, i, "%s: %s", strings.ToUpper(c[0]), why)
		}
		n := len(c)
		if (s.arity > 0 && n != s.arity) || (s.arity < 0 && n < -s.arity) {
			return plan{}, refuseCommand(tokens.ReasonInvalidRequest, fence, t, i, "wrong number of arguments for %s", strings.ToUpper(c[0]))
		}
		if n > maxArgs {
			return plan{}, refuseCommand(tokens.ReasonInvalidRequest, fence, t, i, "%d arguments, more than the %d allowed per command", n, maxArgs)
		}
		last := s.last
		if last < 0 {
			last += n
		}
		if s.last < 0 && (last-s.first+1)%s.step != 0 {
			return plan{}, refuseCommand(tokens.ReasonInvalidRequest, fence, t, i, "wrong number of arguments for %s", strings.ToUpper(c[0]))
		}
		for k := s.first; k <= last; k += s.step {
			key := c[k]
			if strings.HasPrefix(key, reservedPrefix) {
				return plan{}, refuseCommand(tokens.ReasonInvalidRequest, fence, t, i,
					"key %q: keys starting with %q are reserved for fencegate", key, reservedPrefix)
			}
			if tokenSlot >= 0 && Slot(key) != tokenSlot {
				return plan{}, refuseCommand(tokens.ReasonInvalidRequest, fence, t, i,
					"key %q is not in the fence's cluster slot: put the hash tag {%s} in every key, e.g. \"{%s}:%s\"",
					key, fence, fence, key)
			}
			if s.write {
				written.add(key)
			} else {
				read.add(key)
			}
		}
		p.args = append(p.args, len(c))
		for _, a := range c {
			p.args = append(p.args, a)
		}
	}
	p.nw = len(written.list)
	p.args[1] = p.nw
	p.keys = append(p.keys, written.list...)
	for _, k := range read.list {
		if !written.has(k) {
			p.keys = append(p.keys, k)
		}
	}
	return p, nil
}

func refuseCommand(reason tokens.Reason, fence string, t tokens.Token, i int, format string, args ...any) *tokens.RefusalError {
	r := tokens.Refuse(reason, fence, t, "command "+strconv.Itoa(i)+": "+format, args...)
	r.Metadata = map[string]string{"command": strconv.Itoa(i)}
	return r
}

// keySet collects distinct keys in order: a linear search for the few keys
// of a usual request, a map beyond.
type keySet struct {
	list  []string
	index map[string]struct{}
}

const keySetLinear = 16

func (s *keySet) has(k string) bool {
	if s.index != nil {
		_, ok := s.index[k]
		return ok
	}
	for _, x := range s.list {
		if x == k {
			return true
		}
	}
	return false
}

func (s *keySet) add(k string) {
	if s.has(k) {
		return
	}
	s.list = append(s.list, k)
	switch {
	case s.index != nil:
		s.index[k] = struct{}{}
	case len(s.list) > keySetLinear:
		s.index = make(map[string]struct{}, 2*len(s.list))
		for _, x := range s.list {
			s.index[x] = struct{}{}
		}
	}
}

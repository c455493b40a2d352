package redis

import (
	"fmt"
	"slices"
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
	// args: a check of the arguments beyond keys and sizes.
	args argCheck
	// oneStep: see oneStepCommands.
	oneStep bool
	// probed: see probedCommands.
	probed bool

	// name is the upper-case name, which the script is sent (it compares
	// names to treat APPEND and the INCR family); nameArg is name as the
	// script argument, boxed once so a write does not allocate it.
	name    string
	nameArg any
}

// argCheck names the commands whose arguments are checked before sending:
// those that could make Redis allocate far more than the request carries,
// or reach outside the database.
type argCheck uint8

const (
	argsPlain        argCheck = iota
	argsSetRange              // SETRANGE key offset value: offset+len(value) bytes
	argsSetBit                // SETBIT key offset bit: offset/8+1 bytes
	argsCopy                  // COPY src dst [DB n] [REPLACE]: no DB
	argsRandMember            // SRANDMEMBER key -count: count values, repeated
	argsRandField             // HRANDFIELD key -count [WITHVALUES]: likewise
	argsRepeatKeys            // MGET key...: a key named again is its value again
	argsRepeatFields          // HMGET key field...: likewise for a field
)

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
	"MGET":        withArgs(spec(-2, 1, -1, 1, r), argsRepeatKeys),
	"MSET":        spec(-3, 1, -1, 2, w),
	"MSETNX":      spec(-3, 1, -1, 2, w),
	"APPEND":      spec(3, 1, 1, 1, w),
	"INCR":        spec(2, 1, 1, 1, w),
	"INCRBY":      spec(3, 1, 1, 1, w),
	"INCRBYFLOAT": spec(3, 1, 1, 1, w),
	"DECR":        spec(2, 1, 1, 1, w),
	"DECRBY":      spec(3, 1, 1, 1, w),
	"STRLEN":      spec(2, 1, 1, 1, r),
	"SETRANGE":    withArgs(spec(4, 1, 1, 1, w), argsSetRange),
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
	"HMGET":        withArgs(spec(-3, 1, 1, 1, r), argsRepeatFields),
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
	"COPY":        withArgs(optional(-3, 1, 2, 1, w), argsCopy),
	"HSTRLEN":     optional(3, 1, 1, 1, r),
	"HRANDFIELD":  withArgs(optional(-2, 1, 1, 1, r), argsRandField),
	"LPOS":        optional(-3, 1, 1, 1, r),
	"SRANDMEMBER": withArgs(optional(-2, 1, 1, 1, r), argsRandMember),
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
	"SETBIT":      withArgs(optional(4, 1, 1, 1, w), argsSetBit),
	"GETBIT":      optional(3, 1, 1, 1, r),
	"BITCOUNT":    optional(-2, 1, 1, 1, r),
	"PFADD":       optional(-2, 1, 1, 1, w),
}

func optional(arity, first, last, step int, write bool) commandSpec {
	s := spec(arity, first, last, step, write)
	s.optional = true
	return s
}

func withArgs(s commandSpec, c argCheck) commandSpec {
	s.args = c
	return s
}

// oneStepCommands, each alone in a write, need no snapshot for a
// rollback: Redis checks their arguments and the types of their keys
// before it changes anything, so they fail without writing or write and
// succeed; and their replies ("OK", nil, a count, a length, or an INCR
// family's value, which the script reads back exactly past 2^53) are at
// most maxOneStepReply bytes as the script weighs them, so no limit can
// refuse them after they ran. APPEND's limit is weighed before it runs.
// Left out: commands that answer with stored values (GETSET, LPOP, SET
// ... GET, which oneStep checks), floats (INCRBYFLOAT), and those that
// create a key before a later check can fail (ZADD, XADD).
var oneStepCommands = []string{
	"SET", "SETNX", "SETEX", "PSETEX", "MSET", "MSETNX", "APPEND",
	"INCR", "INCRBY", "DECR", "DECRBY",
	"DEL", "UNLINK", "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT", "PERSIST",
	"HSET", "HSETNX", "HMSET", "HDEL", "HINCRBY",
	"LPUSH", "RPUSH", "SADD", "SREM", "ZREM",
}

// maxOneStepReply bounds the reply of a oneStepCommands write: 20 bytes
// for an exact 64-bit integer read back as a string. With MaxReplyBytes
// below it, every write is snapshotted.
const maxOneStepReply = 64

// probedCommands are those on whose key the script runs a command of its
// own: STRLEN before APPEND (MaxValueBytes), GET or HGET after the INCR
// family or HINCRBY (an exact reply past 2^53). A write naming one has the
// script check those with redis.acl_check_cmd before anything runs: under
// a key-scoped ACL, a refused redis.call would abort the script after the
// command wrote.
var probedCommands = []string{"APPEND", "INCR", "INCRBY", "DECR", "DECRBY", "HINCRBY"}

func init() {
	for _, name := range oneStepCommands {
		s := commandTable[name]
		s.oneStep = true
		commandTable[name] = s
	}
	for _, name := range probedCommands {
		s := commandTable[name]
		s.probed = true
		commandTable[name] = s
	}
	for name, s := range commandTable {
		s.name, s.nameArg = name, name
		commandTable[name] = s
	}
}

// oneStep reports whether c, a write's only command with spec s, needs no
// snapshot (see oneStepCommands).
func (b *Backend) oneStep(s commandSpec, c []string) bool {
	if !s.oneStep || b.cfg.MaxReplyBytes < maxOneStepReply {
		return false
	}
	if s.name == "SET" {
		for _, a := range c[3:] {
			if OptionIs(a, "GET") {
				return false // answers with the value it replaced
			}
		}
	}
	return true
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
		"SLOWLOG", "LATENCY", "MEMORY", "OBJECT", "INFO", "FAILOVER", "RESTORE", "DUMP",
		"RANDOMKEY", "DBSIZE", "LASTSAVE", "COMMAND", "SORT", "SORT_RO")
	add("blocking commands are not allowed (they cannot block inside a script)",
		"BLPOP", "BRPOP", "BLMOVE", "BRPOPLPUSH", "BLMPOP", "BZPOPMIN", "BZPOPMAX", "BZMPOP",
		"XREAD", "XREADGROUP", "WAIT", "WAITAOF")
	add("pub/sub is not allowed",
		"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE",
		"PUBLISH", "SPUBLISH", "PUBSUB")
	add("transactions are not allowed (the write already is one)",
		"MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH")
	add(crossDatabase, "SELECT", "MOVE", "SWAPDB", "MIGRATE")
	return m
}()

// crossDatabase is why commands that reach another database are refused:
// the script's snapshots and its rollback cover database 0 only, so what
// such a command wrote elsewhere would stay after a refusal.
const crossDatabase = "reaching another database is not allowed (the rollback covers only this one)"

// reservedPrefix starts every key fencegate keeps for itself.
const reservedPrefix = "fencegate:"

// maxArgs bounds the arguments of one command: the script unpacks them onto
// the Lua stack, which holds at most 8000 values.
const maxArgs = 4096

// allowlist maps upper-case command names to their spec.
type allowlist map[string]commandSpec

// newAllowlist returns the default allowlist plus extra, which must name
// optional commands of the table. Refused families (cross-database
// commands above all) can never be added, even were they in the table.
func newAllowlist(extra []string) (allowlist, error) {
	a := allowlist{}
	for name, s := range commandTable {
		if !s.optional {
			a[name] = s
		}
	}
	for _, name := range extra {
		if err := CheckAllow(name); err != nil {
			return nil, fmt.Errorf("redis: the allowed commands (--redis-allow): %w", err)
		}
		up := upperASCII(name)
		a[up] = commandTable[up]
	}
	return a, nil
}

// DefaultCommands returns the commands allowed by default, sorted.
func DefaultCommands() []string { return tableNames(false) }

// OptionalCommands returns the commands fencegate knows how to check but
// allows only when Config.Allow names them, sorted.
func OptionalCommands() []string { return tableNames(true) }

func tableNames(optional bool) []string {
	var names []string
	for n, s := range commandTable {
		if s.optional == optional {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// lookup finds a command by name, in any ASCII case as Redis matches
// names, without allocating for names already in upper case.
func (a allowlist) lookup(name string) (commandSpec, bool) {
	if s, ok := a[name]; ok {
		return s, true
	}
	for i := 0; i < len(name); i++ {
		if 'a' <= name[i] && name[i] <= 'z' {
			s, ok := a[upperASCII(name)]
			return s, ok
		}
	}
	return commandSpec{}, false
}

// upperASCII upper-cases the letters a to z only. Redis matches command
// names case-insensitively in ASCII alone, where strings.ToUpper would
// also map letters such as U+017F (ſ) to S: "ſet" is no command to Redis,
// and must not be SET to fencegate.
func upperASCII(s string) string {
	i := 0
	for i < len(s) && (s[i] < 'a' || s[i] > 'z') {
		i++
	}
	if i == len(s) {
		return s
	}
	b := []byte(s)
	for ; i < len(b); i++ {
		if 'a' <= b[i] && b[i] <= 'z' {
			b[i] -= 'a' - 'A'
		}
	}
	return string(b)
}

// OptionIs reports whether arg is the option word (upper case), as Redis
// compares a command's options: with strcasecmp, which stops at the first
// NUL byte and folds ASCII letters only. "GET\x00x" is SET's GET option to
// Redis, and "DB\x00" COPY's DB, though neither is the word to a Go string
// comparison (TestRedTeam25CopyDBOptionWithNUL).
func OptionIs(arg, word string) bool {
	if i := strings.IndexByte(arg, 0); i >= 0 {
		arg = arg[:i]
	}
	if len(arg) != len(word) {
		return false
	}
	for i := 0; i < len(arg); i++ {
		c := arg[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != word[i] {
			return false
		}
	}
	return true
}

// plan is a checked request: the script's KEYS and ARGV. Its slices are
// buffers a pooled call keeps from one write to the next (reset), and its
// strings are boxed once each: go-redis takes a command as []any.
type plan struct {
	keys []any // strings: the token key, the written keys, then the keys only read
	nw   int   // number of written keys
	// token, number of written keys to snapshot (nw, or 0 for a write of
	// one oneStepCommands command), MaxValueBytes, MaxReplyBytes, then
	// per command: argc, upper-case name, args...
	args []any
	// lease is set for a lease fence's write: it runs leaseScript.
	lease bool
	// leaseKeys, set by check when leaseHere, are the keys of the
	// fence's lease in this Redis.
	leaseKeys LeaseKeys
	leaseHere bool
	// cmd is the EVALSHA command of keys and args (seal).
	cmd []any

	written, read keySet
}

// maxPooledArgs bounds the buffers a pooled plan keeps: a write of more
// arguments gets buffers of its own, and leaves none in the pool.
const maxPooledArgs = 1024

// reset empties p for another write, keeping its buffers (up to
// maxPooledArgs) and dropping what they held.
func (p *plan) reset() {
	if cap(p.cmd) > maxPooledArgs {
		*p = plan{}
		return
	}
	clear(p.keys)
	clear(p.args)
	clear(p.cmd)
	p.keys, p.args, p.cmd = p.keys[:0], p.args[:0], p.cmd[:0]
	p.nw, p.lease, p.leaseKeys, p.leaseHere = 0, false, LeaseKeys{}, false
	p.written.reset()
	p.read.reset()
}

// seal lays out p's EVALSHA command: EVALSHA, the script's SHA1, the number
// of keys, the keys, then the arguments.
func (p *plan) seal() {
	sha := scriptSHA
	if p.lease {
		sha = leaseScriptSHA
	}
	p.cmd = append(p.cmd[:0], "evalsha", sha, len(p.keys))
	p.cmd = append(p.cmd, p.keys...)
	p.cmd = append(p.cmd, p.args...)
}

// withLease makes p a write of a lease fence whose lease is in this Redis:
// its lease and counter keys go last in KEYS, for leaseCheck. (check has
// refused any command naming either: a client must not take or end a
// lease through fencegate.)
func (p *plan) withLease(lk LeaseKeys) {
	p.keys = append(p.keys, lk.Lease, lk.Counter)
	p.lease = true
}

// Positions in plan.args and the script's ARGV (1-based there).
const (
	argToken = iota
	argWritten
	argMaxValue
	argMaxReply
	argProbe // "1" when a command is in probedCommands, else "0"
	argCommands
)

// check validates a request before anything is sent and lays it out in p,
// empty (new, or reset), for the script. A refusal has Fence and Token set.
func (b *Backend) check(p *plan, fence string, t tokens.Token, cmds [][]string) *tokens.RefusalError {
	switch {
	case fence == "":
		return tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "empty fence name")
	case strings.ContainsAny(fence, "{}"):
		return tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "fence name %q must not contain '{' or '}'", fence)
	case t == 0:
		return tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "fencing token must be greater than 0")
	case len(cmds) == 0:
		return tokens.Refuse(tokens.ReasonInvalidRequest, fence, t, "no commands")
	}
	nargs := argCommands
	for _, c := range cmds {
		nargs += 1 + len(c)
	}
	p.keys = append(p.keys, nil) // the token key, once the write is checked
	p.args = slices.Grow(p.args, nargs)[:argCommands]
	p.args[argMaxValue] = b.maxValueArg
	p.args[argMaxReply] = b.maxReplyArg
	written, read := &p.written, &p.read
	var lease LeaseKeys
	if b.cfg.Leases != nil {
		var ok bool
		if lease, ok = b.cfg.Leases(fence); ok && !lease.Elsewhere {
			p.leaseKeys, p.leaseHere = lease, true
		}
	}
	snapshot, probe := true, false
	for i, c := range cmds {
		if len(c) == 0 || c[0] == "" {
			return refuseCommand(tokens.ReasonInvalidRequest, fence, t, i, "empty command")
		}
		s, ok := b.allow.lookup(c[0])
		if !ok {
			up := upperASCII(c[0])
			why := refusedFamilies[up]
			if why == "" {
				why = "not in the allowlist"
			}
			return refuseCommand(tokens.ReasonCommandNotAllowed, fence, t, i, "%s: %s", up, why)
		}
		n := len(c)
		if (s.arity > 0 && n != s.arity) || (s.arity < 0 && n < -s.arity) {
			return refuseCommand(tokens.ReasonInvalidRequest, fence, t, i, "wrong number of arguments for %s", s.name)
		}
		if n > maxArgs {
			return refuseCommand(tokens.ReasonInvalidRequest, fence, t, i, "%d arguments, more than the %d allowed per command", n, maxArgs)
		}
		last := s.last
		if last < 0 {
			last += n
		}
		if s.last < 0 && (last-s.first+1)%s.step != 0 {
			return refuseCommand(tokens.ReasonInvalidRequest, fence, t, i, "wrong number of arguments for %s", s.name)
		}
		// The command's arguments, each boxed once: KEYS takes its keys
		// from here.
		at := len(p.args)
		p.args = append(p.args, n, s.nameArg)
		for _, a := range c[1:] {
			p.args = append(p.args, a)
		}
		for k := s.first; k <= last; k += s.step {
			key := c[k]
			if strings.HasPrefix(key, reservedPrefix) {
				return refuseCommand(tokens.ReasonInvalidRequest, fence, t, i,
					"key %q: keys starting with %q are reserved for fencegate", key, reservedPrefix)
			}
			if key != "" && (key == lease.Lease || key == lease.Counter) {
				return refuseCommand(tokens.ReasonInvalidRequest, fence, t, i,
					"key %q is the fence's lease (see --redis-lease-key, --redis-lease-counter); it is not written through fencegate", key)
			}
			if !taggedWith(key, fence) {
				return refuseCommand(tokens.ReasonInvalidRequest, fence, t, i,
					"key %q does not carry the fence's hash tag: every key must contain {%s} as its first {...}, e.g. \"{%s}:name\"",
					key, fence, fence)
			}
			if s.write {
				written.add(key, p.args[at+1+k])
			} else {
				read.add(key, p.args[at+1+k])
			}
		}
		if r := b.checkArgs(fence, t, i, s, c); r != nil {
			return r
		}
		if len(cmds) == 1 && b.oneStep(s, c) {
			snapshot = false
		}
		probe = probe || s.probed
	}
	p.args[argProbe] = "0"
	if probe {
		p.args[argProbe] = "1"
	}
	p.nw = len(written.list)
	p.args[argWritten] = 0
	if snapshot {
		p.args[argWritten] = p.nw
	}
	p.keys = append(p.keys, written.list...)
	for _, k := range read.list {
		if !written.has(k.(string)) {
			p.keys = append(p.keys, k)
		}
	}
	// Only a checked write's fence gets an entry in b.args.
	p.keys[0], p.args[argToken] = b.args.of(fence, t)
	return nil
}

// writerOf returns the index of the first of cmds, a checked write, that
// may write key, or -1.
func (b *Backend) writerOf(cmds [][]string, key string) int {
	for i, c := range cmds {
		s, ok := b.allow.lookup(c[0])
		if !ok || !s.write {
			continue
		}
		last := s.last
		if last < 0 {
			last += len(c)
		}
		for k := s.first; k <= last && k < len(c); k += s.step {
			if c[k] == key {
				return i
			}
		}
	}
	return -1
}

// taggedWith reports whether key's hash tag, read as Redis Cluster reads it
// (from the first '{' to the first '}' after it, "{}" being no tag), is
// exactly fence: the key is the fence's by name, not only by slot. fence
// is not empty and holds no brace, so the first '}' after the '{' is the
// one right after fence.
func taggedWith(key, fence string) bool {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return false
	}
	rest := key[i+1:]
	return len(rest) > len(fence) && rest[len(fence)] == '}' && rest[:len(fence)] == fence
}

// elementCost is what each element of a reply counts towards MaxReplyBytes
// besides its bytes; the script counts the same.
const elementCost = 16

// checkArgs bounds the arguments of command i: each at most MaxValueBytes,
// and the few commands that make Redis allocate more than they carry
// checked for what they would allocate.
//
// A read's reply is built in Redis before the script can weigh it. Most
// replies are bounded by the keys they read, but a reply that repeats
// elements (SRANDMEMBER or HRANDFIELD with a negative count, MGET naming
// a key again, HMGET a field) is not: its repeats are weighed here at
// the most a value can be, MaxValueBytes plus elementCost, so that Redis
// never builds more than MaxReplyBytes beyond what the keys hold.
func (b *Backend) checkArgs(fence string, t tokens.Token, i int, s commandSpec, c []string) *tokens.RefusalError {
	maxValue := b.cfg.MaxValueBytes
	// perValue is the most one repeated element of a reply weighs.
	perValue := int64(maxValue) + elementCost
	for j, a := range c {
		if len(a) > maxValue {
			return refuseLimit(tokens.ReasonInvalidRequest, fence, t, i, "MaxValueBytes",
				"argument %d of %s is %d bytes, over the limit of %d", j, s.name, len(a), maxValue)
		}
	}
	switch s.args {
	case argsSetRange:
		off, ok := parseInt(c[2])
		if !ok || off < 0 {
			return refuseCommand(tokens.ReasonInvalidRequest, fence, t, i, "SETRANGE offset %q is not an integer >= 0", c[2])
		}
		if off > int64(maxValue-len(c[3])) {
			return refuseLimit(tokens.ReasonInvalidRequest, fence, t, i, "MaxValueBytes",
				"SETRANGE at offset %d would make a value over the limit of %d bytes", off, maxValue)
		}
	case argsSetBit:
		off, ok := parseInt(c[2])
		if !ok || off < 0 {
			return refuseCommand(tokens.ReasonInvalidRequest, fence, t, i, "SETBIT offset %q is not an integer >= 0", c[2])
		}
		if off/8 >= int64(maxValue) {
			return refuseLimit(tokens.ReasonInvalidRequest, fence, t, i, "MaxValueBytes",
				"SETBIT at bit %d would make a value over the limit of %d bytes", off, maxValue)
		}
	case argsCopy:
		for _, a := range c[3:] {
			if OptionIs(a, "DB") {
				return refuseCommand(tokens.ReasonCommandNotAllowed, fence, t, i, "COPY ... DB: %s", crossDatabase)
			}
		}
	case argsRandMember, argsRandField:
		if len(c) < 3 {
			break
		}
		count, ok := parseInt(c[2])
		if !ok {
			return refuseCommand(tokens.ReasonInvalidRequest, fence, t, i, "%s count %q is not an integer", s.name, c[2])
		}
		// A negative count repeats elements: the reply is -count long
		// however small the key, each element up to MaxValueBytes.
		per := perValue
		if s.args == argsRandField && len(c) > 3 {
			per *= 2 // WITHVALUES: a field and its value
		}
		if count < -int64(b.cfg.MaxReplyBytes)/per {
			return refuseLimit(tokens.ReasonInvalidRequest, fence, t, i, "MaxReplyBytes",
				"%s count %d could make a reply over the limit of %d bytes (each element up to %d bytes)",
				s.name, count, b.cfg.MaxReplyBytes, maxValue)
		}
	case argsRepeatKeys, argsRepeatFields:
		names := c[1:]
		if s.args == argsRepeatFields {
			names = c[2:]
		}
		// Fewer names than allowed repeats need no count.
		allowed := int64(b.cfg.MaxReplyBytes) / perValue
		if int64(len(names)) > allowed+1 && repeats(names, allowed) > allowed {
			what := "key"
			if s.args == argsRepeatFields {
				what = "field"
			}
			return refuseLimit(tokens.ReasonInvalidRequest, fence, t, i, "MaxReplyBytes",
				"%s names a %s again more than %d times, which could make a reply over the limit of %d bytes (values of up to %d bytes each); name each %s once",
				s.name, what, allowed, b.cfg.MaxReplyBytes, maxValue, what)
		}
	}
	return nil
}

// repeats counts the names equal to an earlier one, stopping past limit:
// a linear search for a few names, a map beyond.
func repeats(names []string, limit int64) int64 {
	var n int64
	if len(names) <= keySetLinear {
		for j, a := range names {
			if slices.Contains(names[:j], a) {
				if n++; n > limit {
					break
				}
			}
		}
		return n
	}
	seen := make(map[string]struct{}, len(names))
	for _, a := range names {
		if _, ok := seen[a]; ok {
			if n++; n > limit {
				break
			}
			continue
		}
		seen[a] = struct{}{}
	}
	return n
}

// parseInt parses a decimal integer. It accepts every form Redis's
// string2ll does (and a few more, which Redis then refuses), so a
// number the check reads is the number Redis reads.
func parseInt(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func refuseCommand(reason tokens.Reason, fence string, t tokens.Token, i int, format string, args ...any) *tokens.RefusalError {
	r := tokens.Refuse(reason, fence, t, "command "+strconv.Itoa(i)+": "+format, args...)
	r.Metadata = map[string]string{"command": strconv.Itoa(i)}
	return r
}

// refuseLimit is refuseCommand for a size limit, named in metadata "limit".
func refuseLimit(reason tokens.Reason, fence string, t tokens.Token, i int, limit, format string, args ...any) *tokens.RefusalError {
	r := refuseCommand(reason, fence, t, i, format, args...)
	r.Metadata["limit"] = limit
	return r
}

// keySet collects distinct keys in order, boxed: a linear search for the
// few keys of a usual request, a map beyond.
type keySet struct {
	list  []any // strings
	index map[string]struct{}
}

// reset empties s, keeping its list's buffer.
func (s *keySet) reset() {
	clear(s.list)
	s.list, s.index = s.list[:0], nil
}

const keySetLinear = 16

func (s *keySet) has(k string) bool {
	if s.index != nil {
		_, ok := s.index[k]
		return ok
	}
	for _, x := range s.list {
		if x.(string) == k {
			return true
		}
	}
	return false
}

// add adds k, whose boxed form is boxed, unless s has it.
func (s *keySet) add(k string, boxed any) {
	if s.has(k) {
		return
	}
	s.list = append(s.list, boxed)
	switch {
	case s.index != nil:
		s.index[k] = struct{}{}
	case len(s.list) > keySetLinear:
		s.index = make(map[string]struct{}, 2*len(s.list))
		for _, x := range s.list {
			s.index[x.(string)] = struct{}{}
		}
	}
}

// CheckAllow says whether name may be given in Config.Allow: nil, or why
// not.
func CheckAllow(name string) error {
	up := upperASCII(name)
	if why := refusedFamilies[up]; why != "" {
		return fmt.Errorf("fencegate never allows %s: %s", up, why)
	}
	if _, ok := commandTable[up]; !ok {
		return fmt.Errorf("fencegate cannot check %q (it knows the key positions of: %s)", name, strings.Join(OptionalCommands(), " "))
	}
	return nil
}

package redis

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/tokens"
)

// The attacks of a caller holding a valid token. Each runs against the real
// server and checks, besides the refusal, that nothing was written: the
// fence's keys as they were, no foreign key, the token key untouched and
// no jump in the server's memory. They do not run in parallel, so that the
// memory they measure is theirs.

// memorySlack is how much used_memory may grow during a refused attack:
// client buffers and the like, far below what the attacks would allocate.
const memorySlack = 8 << 20

// victim is a fence with a key written at token 5, and what an attack must
// leave as it is.
type victim struct {
	fence  string
	db     *goredis.Client
	state  map[string]string
	mark   string
	memory int64
}

// newVictim writes a new fence's first state; snapshot records it.
func newVictim(t *testing.T, b *Backend, prefix string) *victim {
	t.Helper()
	return newVictimNamed(t, b, unique(prefix))
}

// newVictimNamed is newVictim for a given fence, which it starts afresh.
func newVictimNamed(t *testing.T, b *Backend, fence string) *victim {
	t.Helper()
	v := &victim{fence: fence, db: admin(t)}
	if err := v.db.Del(t.Context(), TokenKey(fence), key(fence, "a")).Err(); err != nil {
		t.Fatal(err)
	}
	execOKOn(t, b, fence, 5, []string{"SET", key(fence, "a"), "orig"})
	v.snapshot(t)
	return v
}

func (v *victim) snapshot(t *testing.T) {
	t.Helper()
	v.state = contents(t, v.db, v.fence)
	v.mark = v.db.Get(t.Context(), TokenKey(v.fence)).Val()
	v.memory = usedMemory(t, v.db)
}

// attack runs cmds at token 6 (above the mark, so only a defence can stop
// them) and checks the refusal and that nothing changed.
func (v *victim) attack(t *testing.T, b *Backend, want tokens.Reason, command, limit string, cmds ...[]string) *tokens.RefusalError {
	t.Helper()
	_, err := b.Exec(t.Context(), v.fence, 6, cmds)
	if err == nil {
		t.Errorf("attack %s: got accepted, want %s", short(cmds), want)
	} else if r, _ := tokens.AsRefusal(err); r == nil || r.Reason != want {
		t.Errorf("attack %s: got %.300v, want %s", short(cmds), err, want)
	} else {
		if got := r.Metadata["command"]; got != command {
			t.Errorf("attack %s: command got %q, want %q (%.300v)", short(cmds), got, command, err)
		}
		if got := r.Metadata["limit"]; got != limit {
			t.Errorf("attack %s: limit got %q, want %q (%.300v)", short(cmds), got, limit, err)
		}
	}
	v.unchanged(t)
	r, _ := tokens.AsRefusal(err)
	return r
}

func (v *victim) unchanged(t *testing.T) {
	t.Helper()
	if got := contents(t, v.db, v.fence); !reflect.DeepEqual(got, v.state) {
		for k, was := range v.state {
			if got[k] != was {
				t.Errorf("key %s: got %.80q (%d bytes), want unchanged %.80q (%d bytes)", k, got[k], len(got[k]), was, len(was))
			}
		}
		for k := range got {
			if _, ok := v.state[k]; !ok {
				t.Errorf("key %s: got %.80q, want none", k, got[k])
			}
		}
	}
	if got := v.db.Get(t.Context(), TokenKey(v.fence)).Val(); got != v.mark {
		t.Errorf("token key: got %q, want unchanged %q", got, v.mark)
	}
	if got := usedMemory(t, v.db); got-v.memory > memorySlack {
		t.Errorf("used_memory: got %d, want at most %d above the %d before", got, memorySlack, v.memory)
	}
}

// short prints commands with long arguments cut.
func short(cmds [][]string) string {
	var b strings.Builder
	for _, c := range cmds {
		b.WriteString("[")
		for i, a := range c {
			if i > 0 {
				b.WriteString(" ")
			}
			if len(a) > 40 {
				a = fmt.Sprintf("%s...(%d bytes)", a[:20], len(a))
			}
			b.WriteString(strconv.Quote(a))
		}
		b.WriteString("]")
	}
	return b.String()
}

// contents returns every key of fence's tag with its type, expiry and
// value in a canonical form: unlike DUMP, it does not change with the
// order in which a hash table happens to hold its members.
func contents(t *testing.T, db *goredis.Client, fence string) map[string]string {
	t.Helper()
	ctx := t.Context()
	keys, err := db.Keys(ctx, "*{"+fence+"}*").Result()
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]string{}
	for _, k := range keys {
		if k == TokenKey(fence) {
			continue // checked on its own
		}
		typ := db.Type(ctx, k).Val()
		var val any
		switch typ {
		case "string":
			val = db.Get(ctx, k).Val()
		case "list":
			val = db.LRange(ctx, k, 0, -1).Val()
		case "hash":
			val = db.HGetAll(ctx, k).Val() // printed sorted
		case "set":
			m := db.SMembers(ctx, k).Val()
			slices.Sort(m)
			val = m
		case "zset":
			val = db.ZRangeWithScores(ctx, k, 0, -1).Val()
		case "stream":
			val = db.XRange(ctx, k, "-", "+").Val()
		}
		state[k] = fmt.Sprintf("%s ttl=%v %v", typ, db.PTTL(ctx, k).Val() > 0, val)
	}
	return state
}

// usedMemory returns redis-server's used_memory.
func usedMemory(t *testing.T, db *goredis.Client) int64 {
	t.Helper()
	info, err := db.Info(t.Context(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("used_memory %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatalf("INFO memory: no used_memory in %q", info)
	return 0
}

// slotTwin returns a key made by format (with one %d) whose slot is that
// of "{fence}" and that does not carry the tag {fence}.
func slotTwin(t *testing.T, fence, format string) string {
	t.Helper()
	want := Slot("{" + fence + "}")
	for i := range 1 << 22 {
		k := fmt.Sprintf(format, i)
		if Slot(k) == want && !strings.Contains(k, "{"+fence+"}") {
			return k
		}
	}
	t.Fatalf("no key like %q in slot %d", format, want)
	return ""
}

// TestAttackForeignKeys: keys must carry the fence's tag by name. Keys of
// the fence's slot that a slot check lets through, keys of other fences,
// and fencegate's own keys are refused, and none is written.
func TestAttackForeignKeys(t *testing.T) {
	f := unique("bind")
	foreign := []struct {
		name string
		key  string
	}{
		{"untagged, same slot", slotTwin(t, f, "collide:%d")},
		{"tagged with another name, same slot", slotTwin(t, f, "{tw%d}:k")},
		{"tagged {other}", "{other}:k"},
		{"the fence's name, untagged", f},
		{"empty first tag", "{}{" + f + "}:k"},
		{"unclosed tag", "x{" + f},
		{"tag in a later pair", "{x}{" + f + "}:k"},
		{"tag with more", "{" + f + "x}:k"},
		{"tag with less", "{" + f[:len(f)-1] + "}:k"},
		{"the fence's token key", TokenKey(f)},
		{"another reserved key", "fencegate:{" + f + "}:k"},
	}
	for _, tt := range foreign {
		t.Run(tt.name, func(t *testing.T) {
			v := newVictimNamed(t, backend, f)
			for _, cmds := range [][][]string{
				{{"GET", tt.key}},
				{{"DEL", tt.key}},
				{{"MSET", key(f, "a"), "changed", tt.key, "pwned"}},
				{{"SET", key(f, "a"), "changed"}, {"SET", tt.key, "pwned"}},
			} {
				v.attack(t, backend, tokens.ReasonInvalidRequest, strconv.Itoa(len(cmds)-1), "", cmds...)
			}
			if tt.key != TokenKey(f) {
				if n := v.db.Exists(t.Context(), tt.key).Val(); n != 0 {
					t.Errorf("foreign key %q: got written, want absent", tt.key)
				}
			}
		})
	}
	// The fence's own keys, however the tag sits, are the fence's.
	for _, k := range []string{key(f, "b"), "x{" + f + "}", "{" + f + "}", "{" + f + "}{y}", "{" + f + "}}"} {
		execOKOn(t, backend, f, 6, []string{"SET", k, "mine"})
	}
}

// TestAttackSetRangeHugeOffset: SETRANGE and SETBIT make Redis allocate up
// to their offset; beyond MaxValueBytes they are refused before sending.
func TestAttackSetRangeHugeOffset(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Allow = []string{"SETBIT"}
	b := openBackend(t, cfg)
	v := newVictim(t, b, "setrange")
	f, limit := v.fence, cfg.MaxValueBytes
	for _, cmd := range [][]string{
		{"SETRANGE", key(f, "big"), "104857599", "x"},
		{"SETRANGE", key(f, "a"), "104857599", "x"}, // an existing key
		{"SETRANGE", key(f, "big"), strconv.Itoa(limit), "x"},
		{"SETRANGE", key(f, "big"), strconv.Itoa(limit - 1), "xy"},
		{"SETRANGE", key(f, "big"), "9223372036854775807", "x"},
		{"SETBIT", key(f, "big"), "838860792", "1"},
		{"SETBIT", key(f, "big"), strconv.Itoa(8 * limit), "1"},
	} {
		v.attack(t, b, tokens.ReasonInvalidRequest, "1", "MaxValueBytes", []string{"SET", key(f, "a"), "changed"}, cmd)
	}
	for _, cmd := range [][]string{
		{"SETRANGE", key(f, "big"), "-1", "x"},
		{"SETRANGE", key(f, "big"), "1e9", "x"},
		{"SETBIT", key(f, "big"), "-8", "1"},
	} {
		v.attack(t, b, tokens.ReasonInvalidRequest, "0", "", cmd)
	}
	// Up to the limit is fine.
	execOKOn(t, b, f, 6, []string{"SETRANGE", key(f, "edge"), strconv.Itoa(limit - 1), "x"})
	execOKOn(t, b, f, 6, []string{"SETBIT", key(f, "bits"), strconv.Itoa(8*limit - 1), "1"})
	if n := v.db.StrLen(t.Context(), key(f, "edge")).Val(); n != int64(limit) {
		t.Errorf("SETRANGE to the limit: got %d bytes, want %d", n, limit)
	}
}

// TestAttackArgumentSize: every argument is at most MaxValueBytes.
func TestAttackArgumentSize(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxValueBytes = 64 << 10
	b := openBackend(t, cfg)
	v := newVictim(t, b, "argsize")
	f := v.fence
	big := strings.Repeat("v", cfg.MaxValueBytes+1)
	for _, cmd := range [][]string{
		{"SET", key(f, "b"), big},
		{"GETSET", key(f, "a"), big},
		{"HSET", key(f, "h"), "f", big},
		{"HSET", key(f, "h"), big, "v"},
		{"LPUSH", key(f, "l"), "x", big},
		{"XADD", key(f, "x"), "*", "f", big},
		{"SET", key(f, big), "x"},
	} {
		v.attack(t, b, tokens.ReasonInvalidRequest, "1", "MaxValueBytes", []string{"SET", key(f, "a"), "changed"}, cmd)
	}
	execOKOn(t, b, f, 6, []string{"SET", key(f, "b"), big[1:]})
}

// TestAttackAppendGrowth: APPEND grows a string by its argument on each
// write; the script weighs it first and refuses beyond MaxValueBytes.
func TestAttackAppendGrowth(t *testing.T) {
	cfg := DefaultConfig()
	b := openBackend(t, cfg)
	limit := cfg.MaxValueBytes
	v := newVictim(t, b, "append")
	f := v.fence
	execOKOn(t, b, f, 5, []string{"SET", key(f, "big"), strings.Repeat("b", limit-10)})
	v.snapshot(t)
	chunk := strings.Repeat("a", limit)
	for range 64 {
		r := v.attack(t, b, tokens.ReasonStatementFailed, "1", "MaxValueBytes",
			[]string{"SET", key(f, "a"), "changed"},
			[]string{"APPEND", key(f, "big"), chunk})
		if r == nil {
			break
		}
	}
	v.attack(t, b, tokens.ReasonStatementFailed, "0", "MaxValueBytes", []string{"APPEND", key(f, "big"), "01234567890"})
	execOKOn(t, b, f, 6, []string{"APPEND", key(f, "big"), "0123456789"})
	execOKOn(t, b, f, 6, []string{"APPEND", key(f, "new"), chunk})
	// Not a string: APPEND fails as Redis says, rolled back.
	execOKOn(t, b, f, 6, []string{"RPUSH", key(f, "list"), "x"})
	v.snapshot(t)
	r := v.attack(t, b, tokens.ReasonStatementFailed, "1", "", []string{"SET", key(f, "a"), "changed"}, []string{"APPEND", key(f, "list"), "x"})
	if r != nil && !strings.HasPrefix(r.Metadata["error"], "WRONGTYPE") {
		t.Errorf("APPEND to a list: got error %q, want WRONGTYPE", r.Metadata["error"])
	}
}

// TestAttackHugeReplies: the script refuses, and rolls back, a write whose
// replies are over MaxReplyBytes, so no larger reply leaves Redis.
func TestAttackHugeReplies(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxValueBytes, cfg.MaxReplyBytes = 16<<10, 64<<10
	cfg.Allow = []string{"SRANDMEMBER", "HRANDFIELD"}
	b := openBackend(t, cfg)
	v := newVictim(t, b, "replies")
	f := v.fence
	// 80 KiB in each of a list, a hash, a set, a stream and 5 strings.
	elem := strings.Repeat("e", 1<<10)
	list := []string{"RPUSH", key(f, "list")}
	hash := []string{"HSET", key(f, "hash")}
	set := []string{"SADD", key(f, "set")}
	for i := range 80 {
		list = append(list, elem)
		hash = append(hash, strconv.Itoa(i), elem)
		set = append(set, strconv.Itoa(i)+elem)
	}
	setup := [][]string{list, hash, set}
	for range 80 {
		setup = append(setup, []string{"XADD", key(f, "stream"), "*", "f", elem})
	}
	strs, mget := []string{"MSET"}, []string{"MGET"}
	for i := range 5 {
		k := key(f, "s"+strconv.Itoa(i))
		strs = append(strs, k, strings.Repeat("s", 16<<10))
		mget = append(mget, k)
	}
	setup = append(setup, strs)
	execOKOn(t, b, f, 5, setup...)
	v.snapshot(t)

	changeA := []string{"SET", key(f, "a"), "changed"}
	for _, cmd := range [][]string{
		{"LRANGE", key(f, "list"), "0", "-1"},
		{"HGETALL", key(f, "hash")},
		{"HVALS", key(f, "hash")},
		{"SMEMBERS", key(f, "set")},
		{"XRANGE", key(f, "stream"), "-", "+"},
		{"MGET", mget[1], mget[2], mget[3], mget[4], mget[5]},
		{"SRANDMEMBER", key(f, "set"), "80"},
		{"LPOP", key(f, "list"), "80"},
	} {
		v.attack(t, b, tokens.ReasonStatementFailed, "1", "MaxReplyBytes", changeA, cmd)
	}
	// The replies add up: the fifth GET goes over.
	var gets [][]string
	for _, k := range mget[1:] {
		gets = append(gets, []string{"GET", k})
	}
	v.attack(t, b, tokens.ReasonStatementFailed, "4", "MaxReplyBytes", gets...)
	// A negative count repeats elements: the reply is as long as asked,
	// however small the key, so it is weighed before sending. The counts
	// are just over the limit (64 KiB / 16 per element), so that the test
	// stays cheap should the check ever go.
	for _, cmd := range [][]string{
		{"SRANDMEMBER", key(f, "set"), "-5000"},
		{"HRANDFIELD", key(f, "hash"), "-5000"},
		{"HRANDFIELD", key(f, "hash"), "-3000", "WITHVALUES"},
		{"SRANDMEMBER", key(f, "set"), "-9223372036854775808"},
	} {
		v.attack(t, b, tokens.ReasonInvalidRequest, "1", "MaxReplyBytes", changeA, cmd)
	}
	// Within the limit.
	res := execOKOn(t, b, f, 6, []string{"LRANGE", key(f, "list"), "0", "9"}, gets[0], gets[1], gets[2])
	if got := res[0].([]any); len(got) != 10 {
		t.Errorf("LRANGE 0 9: got %d elements, want 10", len(got))
	}
}

// TestAttackCopyToOtherDatabase: COPY's DB option writes where the
// rollback cannot reach; it is refused even with COPY allowed.
func TestAttackCopyToOtherDatabase(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Allow = []string{"COPY"}
	b := openBackend(t, cfg)
	v := newVictim(t, b, "copy")
	f := v.fence
	db1 := goredis.NewClient(&goredis.Options{Addr: server.Addr(), DB: 1, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = db1.Close() })
	for _, cmds := range [][][]string{
		{{"COPY", key(f, "a"), key(f, "b"), "DB", "1"}},
		{{"COPY", key(f, "a"), key(f, "b"), "db", "1", "REPLACE"}},
		{{"COPY", key(f, "a"), key(f, "b"), "REPLACE", "Db", "1"}},
		{{"COPY", key(f, "a"), key(f, "b"), "DB", "0"}},
		// The failing INCR rolls back database 0 only.
		{{"COPY", key(f, "a"), key(f, "b"), "DB", "1"}, {"INCR", key(f, "a")}},
	} {
		v.attack(t, b, tokens.ReasonCommandNotAllowed, "0", "", cmds...)
		if n := db1.Exists(t.Context(), key(f, "b")).Val(); n != 0 {
			t.Errorf("%q: got %s in database 1, want nothing", cmds, key(f, "b"))
			db1.Del(t.Context(), key(f, "b"))
		}
	}
	// COPY within the database is fine.
	execOKOn(t, b, f, 6, []string{"COPY", key(f, "a"), key(f, "b"), "REPLACE"})
	if got := v.db.Get(t.Context(), key(f, "b")).Val(); got != "orig" {
		t.Errorf("COPY: got %q, want orig", got)
	}
}

// TestAttackAllowCrossDatabase: commands that reach another database
// cannot be allowed, whatever Allow says.
func TestAttackAllowCrossDatabase(t *testing.T) {
	for _, name := range []string{"MOVE", "swapdb", "SELECT", "Migrate"} {
		cfg := DefaultConfig()
		cfg.Allow = []string{name}
		b, err := Open(t.Context(), server.Addr(), cfg)
		if err != nil {
			if msg := err.Error(); !strings.Contains(msg, strings.ToUpper(name)) || !strings.Contains(msg, "database") {
				t.Errorf("Open with Allow %s: got %q, want it to name %s and say why", name, msg, strings.ToUpper(name))
			}
			continue
		}
		t.Errorf("Open with Allow %s: got nil, want an error", name)
		// Allowed anyway: show what it does.
		v := newVictim(t, b, "crossdb")
		attacks := map[string][]string{
			"MOVE":    {"MOVE", key(v.fence, "a"), "1"},
			"SWAPDB":  {"SWAPDB", "0", "1"},
			"SELECT":  {"SELECT", "1"},
			"MIGRATE": {"MIGRATE", "127.0.0.1", "1", key(v.fence, "a"), "0", "100"},
		}
		v.attack(t, b, tokens.ReasonCommandNotAllowed, "0", "", attacks[strings.ToUpper(name)])
		_ = b.Close()
	}
}

// TestCommandTableHasNoRefusedCommand: a refused family (cross-database
// commands above all) cannot sneak into the table that Allow draws from.
func TestCommandTableHasNoRefusedCommand(t *testing.T) {
	t.Parallel()
	for name := range refusedFamilies {
		if _, ok := commandTable[name]; ok {
			t.Errorf("%s: got in commandTable, want refused (%s)", name, refusedFamilies[name])
		}
	}
}

// TestExactIntegers: integer replies stay exact over the whole int64
// range, though they pass through Lua's doubles; one the script cannot
// return exactly refuses the write.
func TestExactIntegers(t *testing.T) {
	t.Parallel()
	f := unique("ints")
	k := func(n string) string { return key(f, n) }
	res := execOK(t, f, 1,
		[]string{"INCRBY", k("n"), "9007199254740993"},
		[]string{"INCR", k("n")},
		[]string{"DECRBY", k("m"), "9007199254740993"},
		[]string{"DECR", k("m")},
		[]string{"INCRBY", k("max"), strconv.FormatInt(math.MaxInt64, 10)},
		[]string{"DECRBY", k("min"), strconv.FormatInt(math.MaxInt64, 10)},
		[]string{"DECR", k("min")},
		[]string{"HINCRBY", k("h"), "f", "9007199254740995"},
		[]string{"INCRBY", k("small"), "9007199254740991"},
		[]string{"GET", k("n")},
	)
	want := []any{
		int64(9007199254740993), int64(9007199254740994),
		int64(-9007199254740993), int64(-9007199254740994),
		int64(math.MaxInt64), int64(-math.MaxInt64), int64(math.MinInt64),
		int64(9007199254740995), int64(9007199254740991),
		"9007199254740994",
	}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("replies:\n got %#v\nwant %#v", res, want)
	}
	// A TTL of ~2^53 ms has no exact way through Lua: refused.
	_, err := backend.Exec(t.Context(), f, 2, [][]string{
		{"SET", k("e"), "v"},
		{"EXPIRE", k("e"), "9007199254741"},
		{"PTTL", k("e")},
	})
	r := refusal(t, err, tokens.ReasonStatementFailed)
	if r.Metadata["command"] != "2" || r.Metadata["limit"] != "exact integers" {
		t.Errorf("PTTL beyond 2^53: got metadata %v, want command 2, limit exact integers", r.Metadata)
	}
	if n := admin(t).Exists(t.Context(), k("e")).Val(); n != 0 {
		t.Errorf("after the refused write: got %s written, want nothing", k("e"))
	}
}

// TestAttackOverUnixSocket: a backend on Redis's Unix socket runs the same
// checks as one on its TCP port. A token holder's write to another fence's
// key, one past MaxValueBytes, and a write below the fence's mark are
// refused there too, and nothing is written.
func TestAttackOverUnixSocket(t *testing.T) {
	b, err := Open(t.Context(), server.SocketPath(), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	v := newVictim(t, b, "unixattack")
	f := v.fence
	foreign := "{" + unique("other") + "}:k"
	v.attack(t, b, tokens.ReasonInvalidRequest, "1", "", []string{"SET", key(f, "a"), "changed"}, []string{"SET", foreign, "pwned"})
	if n := v.db.Exists(t.Context(), foreign).Val(); n != 0 {
		t.Errorf("foreign key %q: got written, want absent", foreign)
	}
	v.attack(t, b, tokens.ReasonInvalidRequest, "1", "MaxValueBytes", []string{"SET", key(f, "a"), "changed"}, []string{"SETRANGE", key(f, "big"), "104857599", "x"})
	_, err = b.Exec(t.Context(), f, 4, [][]string{{"SET", key(f, "a"), "zombie"}})
	if r, _ := tokens.AsRefusal(err); r == nil || r.Reason != tokens.ReasonStaleToken {
		t.Errorf("write at token 4 below the mark 5: got %v, want %s", err, tokens.ReasonStaleToken)
	}
	v.unchanged(t)
}

package redis

import (
	"reflect"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/tokens"
)

// A write of one oneStepCommands command runs without a snapshot. These
// tests send each such command in a form Redis refuses and check that the
// refusal left the fence as it was: if Redis wrote anything before
// failing, nothing would restore it.
func TestOneStepFailsWithoutWriting(t *testing.T) {
	t.Parallel()
	db := admin(t)
	fence := unique("onestep")
	str, list, hash, num := key(fence, "str"), key(fence, "list"), key(fence, "hash"), key(fence, "num")
	execOK(t, fence, 3,
		[]string{"SET", str, "text", "PX", "600000"},
		[]string{"RPUSH", list, "a", "b"},
		[]string{"HSET", hash, "f", "text", "n", "9223372036854775807"},
		[]string{"SET", num, "9223372036854775807"},
	)
	failing := [][]string{
		{"SET", str, "v", "EX", "-5"},
		{"SET", str, "v", "NX", "XX"},
		{"SETEX", str, "0", "v"},
		{"PSETEX", str, "-1", "v"},
		{"SETNX", list, "v"}, // no error: SETNX on an existing key of any type answers 0
		{"APPEND", list, "v"},
		{"INCR", str},
		{"INCR", num},
		{"INCRBY", num, "1"},
		{"INCRBY", str, "1"},
		{"DECR", str},
		{"DECRBY", str, "x"},
		{"EXPIRE", str, "soon"},
		{"PEXPIRE", str, "10", "NX", "XX"},
		{"EXPIREAT", str, "x"},
		{"PEXPIREAT", str, "1", "GT", "LT"},
		{"HSET", str, "f", "v"},
		{"HSETNX", list, "f", "v"},
		{"HMSET", str, "f", "v"},
		{"HDEL", str, "f"},
		{"HINCRBY", hash, "f", "1"},
		{"HINCRBY", hash, "n", "1"},
		{"LPUSH", str, "x"},
		{"RPUSH", hash, "x"},
		{"SADD", str, "x"},
		{"SREM", list, "x"},
		{"ZREM", str, "x"},
		{"MSETNX", str, "v", list, "w"}, // answers 0: a key exists
	}
	ctx := t.Context()
	for _, cmd := range failing {
		var p plan
		if r := backend.planOf(&p, fence, 100, [][]string{cmd}); r != nil {
			t.Fatalf("%v: refused before sending: %v", cmd, r)
		}
		if got := p.args[argWritten]; got != 0 {
			t.Fatalf("%v: snapshots %v keys, want none (a oneStepCommands write)", cmd, got)
		}
		before := dump(t, db, fence)
		ttl := db.PTTL(ctx, str).Val()
		hw := highWater(t, fence)
		res, err := backend.Exec(ctx, fence, 100, [][]string{cmd})
		if err == nil {
			if res[0] != int64(0) {
				t.Errorf("%v: got %v accepted, want a refusal or 0", cmd, res)
			}
		} else {
			refusal(t, err, tokens.ReasonStatementFailed)
			if got := highWater(t, fence); got != hw {
				t.Errorf("%v: high-water got %d, want %d (not raised)", cmd, got, hw)
			}
		}
		if after := dump(t, db, fence); !reflect.DeepEqual(after, before) {
			t.Errorf("%v: state after the refused write:\n got %q\nwant %q", cmd, after, before)
		}
		if got := db.PTTL(ctx, str).Val(); got <= 0 || got > ttl {
			t.Errorf("%v: TTL got %v, want %v or slightly less", cmd, got, ttl)
		}
	}
}

// With MaxReplyBytes below what a oneStepCommands reply may weigh, and for
// SET ... GET, whose reply is the value it replaced, a limit can refuse
// the write after the command ran: those writes keep their snapshot and
// are rolled back.
func TestOneStepLimitsRollBack(t *testing.T) {
	t.Parallel()
	db := admin(t)
	ctx := t.Context()

	// INCR past 2^53 answers with the value read back as a string: 17
	// bytes here, over a MaxReplyBytes of 16.
	cfg := DefaultConfig()
	cfg.MaxValueBytes, cfg.MaxReplyBytes = 16, 16
	tiny := openBackend(t, cfg)
	fence := unique("r")
	const was = "90071992547409930"
	if err := db.Set(ctx, key(fence, "n"), was, 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := tiny.Exec(ctx, fence, 5, [][]string{{"INCR", key(fence, "n")}})
	if r := refusal(t, err, tokens.ReasonStatementFailed); r.Metadata["limit"] != "MaxReplyBytes" {
		t.Errorf("INCR under MaxReplyBytes 16: got %v, want the MaxReplyBytes limit", err)
	}
	if got := db.Get(ctx, key(fence, "n")).Val(); got != was {
		t.Errorf("INCR refused by MaxReplyBytes 16: the key holds %s, want %s (rolled back)", got, was)
	}

	cfg.MaxValueBytes, cfg.MaxReplyBytes = 64, 64
	small := openBackend(t, cfg)
	fence = unique("setget")
	big := strings.Repeat("b", 100) // written by someone else, past the limits
	if err := db.Set(ctx, key(fence, "a"), big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = small.Exec(ctx, fence, 5, [][]string{{"SET", key(fence, "a"), "x", "get"}})
	if r := refusal(t, err, tokens.ReasonStatementFailed); r.Metadata["limit"] != "MaxReplyBytes" {
		t.Errorf("SET ... GET of a 100-byte value under MaxReplyBytes 64: got %v, want the MaxReplyBytes limit", err)
	}
	if got := db.Get(ctx, key(fence, "a")).Val(); got != big {
		t.Errorf("SET ... GET refused by MaxReplyBytes: the key holds %.20q, want the 100 bytes it held (rolled back)", got)
	}
	if _, ok, _ := small.HighWater(ctx, fence); ok {
		t.Errorf("refused writes raised the fence's mark")
	}
}

package redis

import (
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam25CopyDBOptionWithNUL
//
// Attack: with COPY allowed (--redis-allow COPY), a token holder sends
// COPY {F}:a {F}:b "DB\x00" 1. fencegate's argsCopy check looks for an
// argument equal to "DB" (strings.EqualFold), and "DB\x00" is not. Redis
// parses COPY's options with strcasecmp on the argument's C string, which
// stops at the NUL: to Redis "DB\x00" is DB (any suffix after the NUL
// works, e.g. "db\x00anything").
//
// What happened (on this code): the write is accepted and the key is
// copied into database 1, which the package doc says can never happen
// ("COPY's DB option [is] refused with COMMAND_NOT_ALLOWED, and
// Config.Allow cannot enable [it]"). Followed by a command that fails
// (INCR of a non-integer), the write is refused STATEMENT_FAILED
// "rolled back", yet the copy in database 1 stays: the rollback covers
// database 0 only. So a refused write leaves data behind, outside the
// fence's database, where fencegate can neither see nor fence it.
//
// What should happen: an option Redis reads as DB is refused
// COMMAND_NOT_ALLOWED before anything is sent, whatever follows a NUL in
// it (compare as Redis does: up to the first NUL), and nothing reaches
// database 1.
//
// Severity: medium (needs COPY in --redis-allow; breaks the documented
// single-database guarantee and all-or-nothing).
func TestRedTeam25CopyDBOptionWithNUL(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Allow = []string{"COPY"}
	b := openBackend(t, cfg)
	v := newVictim(t, b, "rt25copy")
	f := v.fence
	db1 := goredis.NewClient(&goredis.Options{Addr: server.Addr(), DB: 1, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = db1.Close() })
	for _, cmds := range [][][]string{
		{{"COPY", key(f, "a"), key(f, "b"), "DB\x00", "1"}},
		{{"COPY", key(f, "a"), key(f, "c"), "db\x00x", "1", "REPLACE"}},
		// The failing INCR rolls back database 0 only.
		{{"COPY", key(f, "a"), key(f, "d"), "DB\x00", "1"}, {"INCR", key(f, "a")}},
	} {
		v.attack(t, b, tokens.ReasonCommandNotAllowed, "0", "", cmds...)
		dst := cmds[0][2]
		if got, err := db1.Get(t.Context(), dst).Result(); err == nil {
			t.Errorf("%s: database 1 holds %s = %q, want nothing there", short(cmds), dst, got)
			db1.Del(t.Context(), dst)
		}
		v.snapshot(t) // each case on its own: an accepted one raised the mark
	}
}

// TestRedTeam25SetGetNULSkipsSnapshot
//
// Attack: SET key value "GET\x00". Redis reads SET's options by C string
// (opt[3] == '\0'), so to Redis this is SET ... GET and it answers with
// the value it replaced. fencegate's oneStep test (strings.EqualFold(a,
// "GET")) does not see GET, takes the write for one that "answers OK or
// nil" and sends it without a snapshot (ARGV[2] = 0). The script then
// weighs the reply, the old value, against MaxReplyBytes: over it, the
// script returns the limit refusal and "rolls back" nothing, since
// nothing was snapshotted.
//
// Here the key holds a value larger than MaxReplyBytes (written before
// fencegate, or before the limits were lowered: the package doc allows
// for such values) and MaxValueBytes = MaxReplyBytes = 1 KiB.
//
// What happened (on this code): Exec answers STATEMENT_FAILED, limit
// MaxReplyBytes, "(rolled back)", yet the key now holds the new value,
// and the high-water mark was not raised to the write's token: a write
// applied while reported refused, and applied outside rule 2 (the mark
// is raised in the same script as the write).
//
// What should happen: any SET Redis runs as SET ... GET is snapshotted
// like SET ... GET (or refused): refused means nothing written; applied
// means the mark raised.
//
// Severity: medium (a refused write is applied; needs a value above
// MaxReplyBytes in the fence, which the doc names as possible).
func TestRedTeam25SetGetNULSkipsSnapshot(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxValueBytes, cfg.MaxReplyBytes = 1024, 1024
	b := openBackend(t, cfg)
	db := admin(t)
	f := unique("rt25setget")
	k := key(f, "big")
	execOKOn(t, b, f, 5, []string{"SET", key(f, "x"), "1"})
	// A legacy value, larger than MaxReplyBytes, written around fencegate.
	big := strings.Repeat("v", 2000)
	if err := db.Set(t.Context(), k, big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := b.Exec(t.Context(), f, 6, [][]string{{"SET", k, "new", "GET\x00"}})
	got := db.Get(t.Context(), k).Val()
	mark := db.Get(t.Context(), TokenKey(f)).Val()
	if err != nil {
		if got != big {
			t.Errorf("SET k new \"GET\\x00\": refused (%.200v), but the key now holds %q (%d bytes), want the old %d-byte value", err, got, len(got), len(big))
		}
		if mark != "5" {
			t.Errorf("refused write: mark %q, want 5", mark)
		}
		return
	}
	if mark != "6" {
		t.Errorf("applied write: mark %q, want 6", mark)
	}
}

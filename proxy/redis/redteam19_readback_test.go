package redis

import (
	"testing"

	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam19ExactReadbackACLHalfApplies: the fix of round 17 has the
// script ask redis.acl_check_cmd, before anything runs, whether the user
// may RESTORE and DEL each written key, so that a key-scoped ACL cannot
// make the rollback fail half-way. But the script runs other redis.call
// (not pcall) commands on the caller's keys after the caller's commands
// have written: the exact read-back of the INCR family (GET key) and of
// HINCRBY (HGET key field) once a reply reaches 2^53. Open checks GET and
// HGET only on fencegate's own token key. A user whose GET is allowed on
// fencegate's keys only (root "~* +@all -get", selector
// "(~fencegate:* +get)", the same shape as round 17's RESTORE) passes
// Open; then an INCRBY past 2^53 followed by another command raises in
// the read-back: the script aborts with INCRBY applied, the later command
// not run, the mark not raised (seen: BACKEND_UNAVAILABLE "ERR The user
// executing the script can't access at least one of the keys ... on
// @user_script:62", outcome unknown, and the key incremented while the
// SET of the same write is missing).
//
// Expected: all or nothing. Either Open refuses such a user, or the
// script checks the read-back's permission (acl_check_cmd GET/HGET) before
// the first command runs, or reads back with pcall and rolls back.
func TestRedTeam19ExactReadbackACLHalfApplies(t *testing.T) {
	ctx := t.Context()
	const fence = "rt19readback"
	b, db, err := scopedACL(t, "~* +@all -get (~fencegate:* +get)")
	if err != nil {
		t.Logf("Open refused the user: %v", err)
		return
	}
	n, other := key(fence, "n"), key(fence, "other")
	const start = "9007199254740990" // 2^53 - 2
	if err := db.Set(ctx, n, start, 0).Err(); err != nil {
		t.Fatal(err)
	}

	// One all-or-nothing write (a MULTI ... EXEC through the listener).
	_, err = b.Exec(ctx, fence, 5, [][]string{
		{"INCRBY", n, "10"}, // past 2^53: the script reads the value back with GET
		{"SET", other, "x"},
	})
	gotN := db.Get(ctx, n).Val()
	gotOther, oerr := db.Get(ctx, other).Result()
	mark := db.Get(ctx, TokenKey(fence)).Val()
	if err == nil {
		if gotOther != "x" || mark != "5" {
			t.Errorf("write accepted, but %s = %q (err %v), mark %q", other, gotOther, oerr, mark)
		}
		return
	}
	r, _ := tokens.AsRefusal(err)
	if r == nil {
		t.Fatalf("got %v, want a refusal", err)
	}
	if gotN != start {
		t.Errorf("HOLE: write refused as %s %q (metadata %v), yet %s = %q (was %q): INCRBY applied, SET %s applied: %v, mark %q: a half-applied all-or-nothing write",
			r.Reason, r.Error(), r.Metadata, n, gotN, start, other, oerr == nil, mark)
	}
}

// TestRedTeam19AppendLimitSkippedWhenStrlenDenied: APPEND's MaxValueBytes
// limit is weighed in the script with redis.pcall('STRLEN', key), and the
// check is skipped when the reply is not a number. A user that may not
// run STRLEN on data keys (root "~* +@all -strlen", selector
// "(~fencegate:* +strlen)": Open checks STRLEN only on fencegate's token
// key) makes pcall return an error table, so the limit is never checked
// and APPEND grows a value past MaxValueBytes (Config: "MaxValueBytes
// bounds ... the string that SETRANGE, SETBIT or APPEND would make").
//
// Expected: APPEND refused (STATEMENT_FAILED, limit MaxValueBytes) or the
// user refused by Open; a STRLEN that fails must fail the write, not skip
// the check.
func TestRedTeam19AppendLimitSkippedWhenStrlenDenied(t *testing.T) {
	ctx := t.Context()
	const fence = "rt19strlen"
	b, db, err := scopedACL(t, "~* +@all -strlen (~fencegate:* +strlen)", func(cfg *Config) { cfg.MaxValueBytes, cfg.MaxReplyBytes = 16, 1024 })
	if err != nil {
		t.Logf("Open refused the user: %v", err)
		return
	}
	k := key(fence, "s")
	for i := 0; i < 4; i++ {
		_, _ = b.Exec(ctx, fence, 5, [][]string{{"APPEND", k, "0123456789"}})
	}
	if n := db.StrLen(ctx, k).Val(); n > 16 {
		t.Errorf("HOLE: APPEND grew %s to %d bytes, over MaxValueBytes 16: the limit is skipped when STRLEN is refused", k, n)
	}
}

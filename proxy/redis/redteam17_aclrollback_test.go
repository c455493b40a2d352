package redis

import (
	"testing"

	"github.com/fencegate/fencegate/tokens"
)

// TestRedTeam17KeyScopedACLBreaksRollback: the package doc promises "Open
// refuses a user who may not run the commands a write's rollback needs
// (DUMP, PEXPIRETIME, RESTORE, DEL, ...): Redis would abort the script
// there and keep the half-done write." But checkACL asks
// redis.acl_check_cmd only about the token key fencegate:{acl-check}:token,
// while Redis 7 ACLs are per key (selectors). A user allowed RESTORE only
// on fencegate's own keys (root "~* +@all -restore", selector
// "(~fencegate:* +restore)") passes Open, and then every write that must
// roll back aborts at the RESTORE of its first data key: the commands
// before the failing one stay applied (reported as BACKEND_UNAVAILABLE,
// outcome unknown, so the client cannot even tell its write half
// happened). The same user on any fence turns every failed command into
// a half-applied write.
//
// Expected: Open refuses this user (check the rollback's commands against
// a data key as well, e.g. a key of the fence's tag form), so that a
// refused write is never left half applied.
func TestRedTeam17KeyScopedACLBreaksRollback(t *testing.T) {
	ctx := t.Context()
	const fence = "rt17acl"
	b, db, err := scopedACL(t, "~* +@all -restore (~fencegate:* +restore)")
	if err != nil {
		t.Logf("Open refused the user: %v", err)
		return
	}
	a, text := key(fence, "a"), key(fence, "text")
	if err := db.Set(ctx, a, "orig", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := db.Set(ctx, text, "not a number", 0).Err(); err != nil {
		t.Fatal(err)
	}

	_, err = b.Exec(ctx, fence, 1, [][]string{
		{"SET", a, "changed"},
		{"INCR", text}, // fails: the write must be rolled back
	})
	r, _ := tokens.AsRefusal(err)
	if r == nil {
		t.Fatalf("got %v, want a refusal", err)
	}
	if got := db.Get(ctx, a).Val(); got != "orig" {
		t.Errorf("Open accepted a user who may not RESTORE data keys; a write refused as %s (%q, metadata %v) left %s = %q, want %q: the refused write was partly applied",
			r.Reason, r.Error(), r.Metadata, a, got, "orig")
	}
}

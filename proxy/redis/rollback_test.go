package redis

import (
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/tokens"
)

// expiryOf returns k's PEXPIRETIME: Unix ms, -1 for no expiry, -2 for no
// key. go-redis's PExpireTime would overflow a Duration beyond ~292 years.
func expiryOf(t *testing.T, db *goredis.Client, k string) int64 {
	t.Helper()
	at, err := db.Do(t.Context(), "PEXPIRETIME", k).Int64()
	if err != nil {
		t.Fatalf("PEXPIRETIME %s: %v", k, err)
	}
	return at
}

// setWithExpiry sets k to v, expiring at Unix ms at (none if at is 0).
func setWithExpiry(t *testing.T, db *goredis.Client, k, v string, at int64) {
	t.Helper()
	ctx := t.Context()
	if err := db.Set(ctx, k, v, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if at != 0 {
		if err := db.Do(ctx, "PEXPIREAT", k, at).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRollbackKeepsAbsoluteExpiry: a rolled-back write leaves every key
// it wrote with its value and its expiry to the millisecond, however long
// the script ran, up to the last expiry exact in Lua (2^53-1 ms).
func TestRollbackKeepsAbsoluteExpiry(t *testing.T) {
	t.Parallel()
	db := admin(t)
	inAnHour := time.Now().Add(time.Hour).UnixMilli()
	tests := []struct {
		name string
		at   int64 // the key's expiry, Unix ms
		cmds func(k, other string) [][]string
	}{
		{"one key", inAnHour, func(k, _ string) [][]string {
			return [][]string{{"ZADD", k, "1", "m"}}
		}},
		{"two keys", inAnHour, func(k, other string) [][]string {
			return [][]string{{"SET", other, "changed", "PX", "10"}, {"SET", k, "changed"}, {"ZADD", k, "1", "m"}}
		}},
		{"expiry dropped before the failure", inAnHour, func(k, other string) [][]string {
			return [][]string{{"PERSIST", k}, {"APPEND", k, "w"}, {"INCR", other}}
		}},
		{"last exact expiry", 1<<53 - 1, func(k, other string) [][]string {
			return [][]string{{"PEXPIRE", other, "10"}, {"APPEND", k, "w"}, {"LPUSH", k, "x"}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fence := unique("expiry")
			k, other := key(fence, "k"), key(fence, "other")
			setWithExpiry(t, db, k, "v", tt.at)
			setWithExpiry(t, db, other, "text", 0)

			_, err := backend.Exec(t.Context(), fence, 3, tt.cmds(k, other))
			refusal(t, err, tokens.ReasonStatementFailed)
			for _, want := range []struct {
				key, value string
				at         int64
			}{{k, "v", tt.at}, {other, "text", -1}} {
				if got := db.Get(t.Context(), want.key).Val(); got != want.value {
					t.Errorf("%s after the rollback: got %q, want %q", want.key, got, want.value)
				}
				if got := expiryOf(t, db, want.key); got != want.at {
					t.Errorf("PEXPIRETIME of %s after the rollback: got %d, want %d", want.key, got, want.at)
				}
			}
			if got := highWater(t, fence); got != 0 {
				t.Errorf("high-water: got %d, want none (not raised)", got)
			}
		})
	}
}

// TestRollbackKeepsShortExpiry: a key in its last millisecond that a
// rolled-back write snapshotted is restored with its expiry (or is gone),
// never left without one. The remaining time (PTTL) can read 0 for a
// key the script still sees, and restored as a TTL of 0 it meant no
// expiry at all.
func TestRollbackKeepsShortExpiry(t *testing.T) {
	t.Parallel()
	const tries = 300
	tests := []struct {
		name  string
		width int // writes at once on a backend of one connection slot: pipelined
		cmds  func(k, other string) [][]string
	}{
		{"the failing command writes it", 1, func(k, _ string) [][]string {
			return [][]string{{"ZADD", k, "1", "m"}}
		}},
		{"a later command fails", 1, func(k, other string) [][]string {
			return [][]string{{"SET", k, "changed"}, {"INCR", other}}
		}},
		{"batched", 4, func(k, _ string) [][]string {
			return [][]string{{"ZADD", k, "1", "m"}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := admin(t)
			b := backend
			if tt.width > 1 {
				b = openBackend(t, onePoolSlot())
			}
			ctx := t.Context()
			fence := unique("short")
			other := key(fence, "other")
			setWithExpiry(t, db, other, "text", 0)
			keys := make([]string, tt.width)
			for i := range keys {
				keys[i] = key(fence, "k"+string(rune('a'+i)))
			}
			var permanent, applied int
			var mu sync.Mutex
			for range tries {
				if _, err := db.Pipelined(ctx, func(p goredis.Pipeliner) error {
					for _, k := range keys {
						p.Set(ctx, k, "short-lived", time.Millisecond)
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				for _, k := range keys {
					wg.Go(func() {
						_, err := b.Exec(ctx, fence, 1, tt.cmds(k, other))
						mu.Lock()
						defer mu.Unlock()
						if err == nil {
							applied++ // the key expired first: ZADD made a new one
							return
						}
						if r, _ := tokens.AsRefusal(err); r == nil || r.Reason != tokens.ReasonStatementFailed {
							t.Errorf("Exec: got %v, want %s", err, tokens.ReasonStatementFailed)
						}
					})
				}
				wg.Wait()
				for _, k := range keys {
					if ttl := db.PTTL(ctx, k).Val(); ttl == -1 && db.Type(ctx, k).Val() == "string" {
						permanent++
					}
					if err := db.Del(ctx, k).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if permanent > 0 {
				t.Errorf("%d of %d keys set with PX 1 left without expiry by a rolled-back write (%d writes applied on an expired key)",
					permanent, tries*len(keys), applied)
			}
		})
	}
}

// TestRollbackRefusesExpiryBeyondExactRange: a key written by a
// snapshotted write whose expiry is 2^53 ms or more after the epoch (which
// Redis accepts) cannot be restored exactly: RESTORE would fail on the
// rounded number and leave the write half applied. Such a write is
// refused before any command runs. A write of one command that needs no
// snapshot (PERSIST) still goes through, a way out.
func TestRollbackRefusesExpiryBeyondExactRange(t *testing.T) {
	t.Parallel()
	const farAway = 123456789012345678 // ms, ~3.9 million years
	db := admin(t)
	ctx := t.Context()
	fence := unique("farexpiry")
	far, a := key(fence, "far"), key(fence, "a")

	tests := []struct {
		name string
		cmds [][]string
	}{
		// Rolled back, far before a: RESTORE of far would abort the
		// script with a still changed.
		{"failing", [][]string{{"APPEND", far, "w"}, {"SET", a, "changed"}, {"LPUSH", a, "x"}}},
		{"succeeding", [][]string{{"SET", a, "changed"}, {"APPEND", far, "w"}}},
	}
	for _, tt := range tests {
		setWithExpiry(t, db, far, "v", farAway)
		setWithExpiry(t, db, a, "orig", 0)
		_, err := backend.Exec(ctx, fence, 3, tt.cmds)
		switch r, _ := tokens.AsRefusal(err); {
		case r == nil || r.Reason != tokens.ReasonStatementFailed:
			t.Errorf("%s: got %v, want %s", tt.name, err, tokens.ReasonStatementFailed)
		case r.Metadata["command"] != "0" || r.Metadata["limit"] != "exact expiry":
			t.Errorf("%s: got metadata %v, want command 0, limit exact expiry", tt.name, r.Metadata)
		case !strings.Contains(r.Msg, far) || !strings.Contains(r.Msg, "2^53"):
			t.Errorf("%s: got message %q, want it to name %s and 2^53", tt.name, r.Msg, far)
		}
		for _, want := range []struct {
			key, value string
			at         int64
		}{{far, "v", farAway}, {a, "orig", -1}} {
			if got := db.Get(ctx, want.key).Val(); got != want.value {
				t.Errorf("%s: %s got %q, want unchanged %q", tt.name, want.key, got, want.value)
			}
			if got := expiryOf(t, db, want.key); got != want.at {
				t.Errorf("%s: PEXPIRETIME of %s got %d, want unchanged %d", tt.name, want.key, got, want.at)
			}
		}
		if n := db.Exists(ctx, TokenKey(fence)).Val(); n != 0 {
			t.Errorf("%s: token key got written, want none", tt.name)
		}
	}

	execOK(t, fence, 3, []string{"PERSIST", far})
	execOK(t, fence, 4, []string{"SET", a, "changed"}, []string{"APPEND", far, "w"})
	if got := db.Get(ctx, far).Val(); got != "vw" {
		t.Errorf("after PERSIST: got %q, want %q", got, "vw")
	}
}
